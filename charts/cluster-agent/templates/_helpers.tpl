{{/*
The labels of every object of the chart, as deploy/cluster-agent/ has
them; the pods' selector uses only the name.
*/}}
{{- define "cluster-agent.labels" -}}
app.kubernetes.io/name: cluster-agent
app.kubernetes.io/part-of: fleet-scheduler
{{- end }}

{{/*
The agent's ServiceAccount as the subject of a (Cluster)RoleBinding.
*/}}
{{- define "cluster-agent.subject" -}}
- kind: ServiceAccount
  name: cluster-agent
  namespace: {{ .Release.Namespace }}
{{- end }}
