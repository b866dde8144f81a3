{% extends "base.sh" %}
{% block directives %}
#BSUB -J {{ job_name | d }}{% if array %}[{{ array.range | d }}]{% endif %}

{% if account %}
#BSUB -P {{ account | d }}
{% endif %}
#BSUB -W {{ walltime }}
#BSUB -nnodes {{ nodes }}
{% if queue %}
#BSUB -q {{ queue | d }}
{% endif %}
{% if array %}
#BSUB -o {{ log_dir | d }}/{{ array_log | d }}
#BSUB -e {{ log_dir | d }}/{{ array_log | d }}
{% else %}
#BSUB -o {{ log_dir | d }}/{{ job_log | d }}
#BSUB -e {{ log_dir | d }}/{{ job_log | d }}
{% endif %}
{% if signal %}
#BSUB -wa {{ signal }}
#BSUB -wt {{ signal_lead }}
{% endif %}
{% block site_directives %}{% endblock %}
{% for line in directives %}
{{ line }}
{% endfor %}
{% endblock %}
