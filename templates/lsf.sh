{% extends "base.sh" %}
{% block directives %}
#BSUB -J {{ job_name | d }}{% if array %}[{{ array.range | d }}]{% endif %}

{% if account %}
#BSUB -P {{ account | d }}
{% endif %}
#BSUB -W {{ lsf_walltime }}
#BSUB -nnodes {{ nodes }}
{% if queue %}
#BSUB -q {{ queue | d }}
{% endif %}
{% if array %}
#BSUB -o {{ log_dir | d }}/array-%J_%I.out
#BSUB -e {{ log_dir | d }}/array-%J_%I.out
{% else %}
#BSUB -o {{ log_dir | d }}/job-%J.out
#BSUB -e {{ log_dir | d }}/job-%J.out
{% endif %}
{% if signal %}
#BSUB -wa {{ signal }}
#BSUB -wt {{ lsf_warning }}
{% endif %}
{% block site_directives %}{% endblock %}
{% for line in directives %}
{{ line }}
{% endfor %}
{% endblock %}
