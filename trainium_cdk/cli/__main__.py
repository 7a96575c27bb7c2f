"""`python -m trainium_cdk.cli`: the same as the `trn` console script."""

from trainium_cdk.cli import main

raise SystemExit(main())
