{% extends "slurm.sh" %}
{# Piz Daint: --constraint=gpu selects the XC50 nodes; ranks sharing the P100 get CRAY_CUDA_MPS=1 (profile share_setup). #}
