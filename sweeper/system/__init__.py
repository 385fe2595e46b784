"""The system: what this machine has and what a trial's processes use of it.

* :mod:`~sweeper.system.gpus`: the GPUs, read through NVML, never through CUDA;
* :mod:`~sweeper.system.capping`: GPU memory caps, decided in the parent;
* :mod:`~sweeper.system.headroom`, :mod:`~sweeper.system.hostmem`: room for one more process; a
  trial's peak host memory;
* :mod:`~sweeper.system.procs`: everything a trial started, found so that none of it outlives it;
* :mod:`~sweeper.system.modules`: which installed modules a fork server may import ahead;
* :mod:`~sweeper.system.environment`: what a sweep ran on, recorded and compared;
* :mod:`~sweeper.system.entrypoints`: plugins installed here, an entry point group's names, loaded.
"""
