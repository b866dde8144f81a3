{% extends "base.sh" %}
{# PBS Pro as ALCF documents it (Aurora, Polaris): whole nodes by select, scattered; filesystems are mandatory;
   -k doe writes the output where it ends up. No signal before the walltime: the NNLO_DEADLINE clock stops jobs. #}
{% block shebang %}
#!/bin/bash -l
{% endblock %}
{% block directives %}
#PBS -N {{ job_name | d }}
{% if account %}
#PBS -A {{ account | d }}
{% endif %}
{% if queue %}
#PBS -q {{ queue | d }}
{% endif %}
#PBS -l select={{ nodes }}{% if pbs_system %}:system={{ pbs_system | d }}{% endif %}

#PBS -l place=scatter
#PBS -l walltime={{ walltime }}
{% if filesystems %}
#PBS -l filesystems={{ filesystems | d }}
{% endif %}
#PBS -k doe
{% if array %}
#PBS -J {{ array.range | d }}
#PBS -r y
{% endif %}
#PBS -o {{ log_dir | d }}/
#PBS -e {{ log_dir | d }}/
{% block site_directives %}{% endblock %}
{% for line in directives %}
{{ line }}
{% endfor %}
{% endblock %}
