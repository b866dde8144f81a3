{% extends "base.sh" %}
{% block directives %}
# Local job: started by nnlo's local scheduler on this machine (no batch system, no directives).
{% for line in directives %}
{{ line }}
{% endfor %}
{% endblock %}
