{% extends "pbs.sh" %}
{# Titan: the batch script runs on a service node; only aprun reaches the compute nodes (see the launch line). #}
