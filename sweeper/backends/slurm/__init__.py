"""The Slurm backend (``backend="slurm"``): each trial a task of a Slurm array job, through
files in the sweep's folder, which the cluster's nodes share.

The parts, each a module (lower ones never import higher ones)::

    backend    SlurmBackend: the Backend protocol's methods: holding, submitting as arrays,
      │        hearing from tasks through their files, judging what Slurm says of those that
      │        returned nothing or wait for ever, cancelling
      ├─ adoption  a killed driver's tasks found by the next one (marks, the arrays' comments)
      ├─ outside   the sweep's tasks seen by another process: status's lines, a Ctrl-C before
      │            the adoption (cancelled), what a dry run would submit
      ├─ rules     what needs no Slurm: how many held trials go in the next array, how a task
      │            that returned nothing ended, which pending reasons mean never, whether the
      │            folder is shared, the jobs' name, a task's marks
      ├─ commands  sbatch, squeue, scontrol, scancel: the one place that runs them (no sacct)
      └─ options   SlurmOptions: its options group (``slurm={...}``, ``--slurm KEY=VALUE``)

Importing this package imports none of them (the registry imports ``options`` alone).
"""
