{% extends "lsf.sh" %}
{# Summit: ranks that share a GPU need the CUDA Multi-Process Service, enabled per job by alloc_flags. #}
{% block site_directives %}
{% if shares_gpus %}
#BSUB -alloc_flags "gpumps smt1"
{% endif %}
{% endblock %}
