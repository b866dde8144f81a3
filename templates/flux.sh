{% extends "base.sh" %}
{# Flux (El Capitan, Tuolumne): #flux: directives; -t in minutes; the warning signal reaches this script and its
   running jobs (--signal=SIG@TIME). The job's chain commands inside it talk to the system instance (--parent). #}
{% block directives %}
#flux: --job-name={{ job_name | d }}
#flux: -N {{ nodes }}
#flux: --exclusive
#flux: -t {{ walltime }}
{% if queue %}
#flux: -q {{ queue | d }}
{% endif %}
{% if account %}
#flux: --bank={{ account | d }}
{% endif %}
{% if signal %}
#flux: --signal={{ signal }}@{{ signal_lead }}
{% endif %}
#flux: --output={{ log_dir | d }}/{{ job_log }}
{% block site_directives %}{% endblock %}
{% for line in directives %}
{{ line }}
{% endfor %}
{% endblock %}
