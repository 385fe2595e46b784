"""sweeper's Hydra launcher plugin: ``python app.py -m hydra/launcher=sweeper ...`` (see docs/hydra.md)."""
