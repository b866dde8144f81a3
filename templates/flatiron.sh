{% extends "slurm.sh" %}
{# Flatiron rusty: the GPU partition takes -C v100 / -C a100 as --constraint and GPUs as --gpus-per-node. #}
