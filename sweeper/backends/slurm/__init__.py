"""The Slurm backend (``backend="slurm"``): each trial a task of a Slurm array job, through
files in the sweep's folder, which the cluster's nodes share.

The parts, each a module (lower ones never import higher ones)::

    backend    SlurmBackend: the Backend protocol's methods: holding, submitting as arrays,
      │        hearing from tasks through their files, judging what Slurm says of those that
      │        returned nothing, cancelling, adopting a killed driver's tasks
      ├─ rules     what needs no Slurm: how many held trials go in the next array, how a task
      │            that returned nothing ended, whether the folder is shared, a task's marks
      ├─ commands  sbatch, squeue, scontrol, scancel: the one place that runs them (no sacct)
      └─ options   SlurmOptions: its options group (``slurm={...}``, ``--slurm KEY=VALUE``)

Importing this package imports neither (the registry imports ``options`` alone).
"""
