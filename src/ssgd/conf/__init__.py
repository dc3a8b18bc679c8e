"""The shipped Hydra configuration (package data): config.yaml and its groups. A package so that Hydra
finds it as the primary config module of the app (`ssgd.run.app`) wherever ssgd is installed."""
