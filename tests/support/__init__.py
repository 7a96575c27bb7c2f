"""Every module the tests share that holds no tests: apps, helpers, stand-ins, models, fake servers."""
