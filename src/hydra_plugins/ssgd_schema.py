"""Registers the ssgd config schema (`base_config`, src/ssgd/config.py) and the run-directory resolvers
of conf/config.yaml (`ssgd_unique`, `ssgd_dirname`: src/ssgd/run/rundir.py) whenever Hydra starts.

Hydra imports every module of the `hydra_plugins` namespace package when it initialises (for
`@hydra.main` and for the compose API alike), so any program that composes `conf/` (the trainer, the
benchmarks, the figure scripts, the tests) finds the schema without importing it first.
"""
from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

import ssgd.config  # noqa: F401  (the import registers the schema in Hydra's ConfigStore)
import ssgd.run.rundir  # noqa: F401  (the import registers the run-directory resolvers)


class SsgdSchema(SearchPathPlugin):
    """A plugin only so that Hydra imports this module; the search path is left as it is."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        pass
