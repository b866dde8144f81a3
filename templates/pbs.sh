{% extends "base.sh" %}
{% block directives %}
#PBS -N {{ job_name | d }}
{% if account %}
#PBS -A {{ account | d }}
{% endif %}
#PBS -l walltime={{ walltime }}
{% if array %}
#PBS -J {{ array.range | d }}
{% endif %}
#PBS -l nodes={{ nodes }}
{% if queue %}
#PBS -q {{ queue | d }}
{% endif %}
#PBS -o {{ log_dir | d }}/
#PBS -e {{ log_dir | d }}/
{% block site_directives %}{% endblock %}
{% for line in directives %}
{{ line }}
{% endfor %}
{% endblock %}
