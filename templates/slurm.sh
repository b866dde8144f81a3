{% extends "base.sh" %}
{% block directives %}
#SBATCH --job-name={{ job_name | d }}
#SBATCH --nodes={{ nodes }}
#SBATCH --ntasks-per-node={{ ranks_per_node }}
#SBATCH --cpus-per-task={{ cores_per_rank }}
#SBATCH --time={{ walltime }}
{% if account %}
#SBATCH --account={{ account | d }}
{% endif %}
{% if queue and queue_qos %}
#SBATCH --qos={{ queue | d }}
{% elif queue %}
#SBATCH --partition={{ queue | d }}
{% endif %}
{% if constraint %}
#SBATCH --constraint={{ constraint | d }}
{% endif %}
{% if gpus_per_node_request %}
{% if gpu_directive == "gres" %}
#SBATCH --gres=gpu:{{ gpus_per_node_request }}
{% elif gpu_directive == "gpus-per-node" %}
#SBATCH --gpus-per-node={{ gpus_per_node_request }}
{% endif %}
{% endif %}
{% if signal %}
#SBATCH --signal=B:{{ signal }}@{{ signal_lead }}
{% endif %}
{% if array %}
#SBATCH --array={{ array.range | d }}
#SBATCH --output={{ log_dir | d }}/{{ array_log | d }}
#SBATCH --error={{ log_dir | d }}/{{ array_log | d }}
{% else %}
#SBATCH --output={{ log_dir | d }}/{{ job_log | d }}
#SBATCH --error={{ log_dir | d }}/{{ job_log | d }}
{% endif %}
{% block site_directives %}{% endblock %}
{% for line in directives %}
{{ line }}
{% endfor %}
{% endblock %}
