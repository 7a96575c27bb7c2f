"""Code that runs in AWS Lambda, deployed as an asset of its folder: standard library and boto3 only."""
