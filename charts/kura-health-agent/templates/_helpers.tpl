{{- define "kha.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kha.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kha.labels" -}}
app.kubernetes.io/name: {{ include "kha.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "kha.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kha.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kha.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kha.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The replica group: the Leases' agent-group label and name prefix. */}}
{{- define "kha.agentGroup" -}}
{{- default (include "kha.fullname" .) .Values.sharding.group | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Refuses every rendering that would make two writers of one KuraInstance:
several replicas (or a DaemonSet) without sharding.
*/}}
{{- define "kha.validate" -}}
{{- include "kha.validateDerived" . }}
{{- if not (has .Values.mode (list "deployment" "daemonset")) }}
{{- fail (printf "mode must be deployment or daemonset, not %q" .Values.mode) }}
{{- end }}
{{- include "kha.validateDaemonSetNodes" . }}
{{- if not (has .Values.publication.target (list "auto" "instance" "companion")) }}
{{- fail (printf "publication.target must be auto, instance or companion, not %q" .Values.publication.target) }}
{{- end }}
{{- if not .Values.sharding.enabled }}
{{- if eq .Values.mode "daemonset" }}
{{- fail "mode daemonset needs sharding.enabled=true: every node's replica would write every KuraInstance's status" }}
{{- end }}
{{- if ne (int .Values.replicaCount) 1 }}
{{- fail "replicaCount must be 1 without sharding: two replicas would both write every KuraInstance's status (set sharding.enabled=true)" }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The gate configuration document (JSON) of the gate ConfigMap (without
the shadow configuration, which has its own document). */}}
{{- define "kha.gateConfig" -}}
{{- omit (.Values.gate | default dict) "shadow" | toJson -}}
{{- end -}}

{{/* The shadow gate configuration document (JSON), empty when values
gate.shadow is null or left out (no shadow). */}}
{{- define "kha.shadowGateConfig" -}}
{{- $gate := .Values.gate | default dict -}}
{{- if kindIs "map" (get $gate "shadow") -}}
{{- get $gate "shadow" | toJson -}}
{{- end -}}
{{- end -}}

{{/* The agent's pod template, shared by the Deployment and the DaemonSet. */}}
{{- define "kha.podTemplate" -}}
metadata:
  labels:
    {{- include "kha.selectorLabels" . | nindent 4 }}
  annotations:
    # A new gate configuration rolls the agent: it reads the file at start.
    checksum/gate-config: {{ include "kha.gateConfig" . | sha256sum }}
    {{- with include "kha.shadowGateConfig" . }}
    checksum/shadow-gate-config: {{ . | sha256sum }}
    {{- end }}
spec:
  serviceAccountName: {{ include "kha.serviceAccountName" . }}
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  securityContext:
    {{- toYaml .Values.podSecurityContext | nindent 4 }}
  terminationGracePeriodSeconds: 30
  containers:
    - name: agent
      image: "{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}"
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      args:
        - run
        {{- range .Values.watch.namespaces }}
        - --namespace={{ . }}
        {{- end }}
        {{- with .Values.watch.instanceSelector }}
        - --instance-selector={{ . }}
        {{- end }}
        {{- with .Values.watch.podSelector }}
        - --pod-selector={{ . }}
        {{- end }}
        - --container-name={{ .Values.watch.containerName }}
        - --port={{ .Values.poll.port }}
        {{- with .Values.poll.portName }}
        - --port-name={{ . }}
        {{- end }}
        {{- if .Values.poll.interval }}
        - --sweep-interval={{ .Values.poll.interval }}
        {{- else }}
        - --rollout-interval={{ .Values.poll.rolloutInterval }}
        - --steady-interval={{ .Values.poll.steadyInterval }}
        {{- end }}
        - --settle={{ .Values.poll.settle }}
        - --poll-timeout={{ .Values.poll.timeout }}
        - --poll-concurrency={{ .Values.poll.concurrency }}
        - --body-limit={{ .Values.poll.bodyLimitBytes }}
        {{- if .Values.nodeLocal.enabled }}
        - --port-forward-streams={{ .Values.nodeLocal.portForwardStreams }}
        {{- end }}
        - --heartbeat={{ .Values.status.heartbeat }}
        - --heartbeat-max={{ .Values.status.heartbeatMax }}
        - --heartbeat-writes-per-second={{ .Values.status.heartbeatWritesPerSecond }}
        - --write-rate={{ .Values.status.writesPerSecond }}
        - --debug-listen=[::]:{{ .Values.debug.port }}
        - --timeline-budget-bytes={{ int64 .Values.debug.timelineBudgetBytes }}
        - --log-format={{ .Values.logFormat }}
        - --sharding={{ .Values.sharding.enabled }}
        - --gate-config=/etc/kura-health-agent/gate.json
        {{- if include "kha.shadowGateConfig" . }}
        - --shadow-gate-config=/etc/kura-health-agent/shadow-gate.json
        {{- end }}
        {{- if .Values.sharding.enabled }}
        - --agent-group={{ include "kha.agentGroup" . }}
        - --lease-duration={{ .Values.sharding.leaseDuration }}
        - --shard-units={{ .Values.sharding.units }}
        - --shard-pod-selection={{ include "kha.podSelection" . }}
        - --stamp-shard-labels={{ .Values.sharding.stampLabels }}
        {{- end }}
        {{- range .Values.extraArgs }}
        - {{ . }}
        {{- end }}
      env:
        # Where the agent publishes (publication.target); the RBAC follows it.
        - name: KURA_AGENT_PUBLICATION_TARGET
          value: {{ .Values.publication.target | quote }}
        - name: POD_NAME
          valueFrom:
            fieldRef:
              fieldPath: metadata.name
        # The replicas' Leases live in the agent's own namespace.
        - name: POD_NAMESPACE
          valueFrom:
            fieldRef:
              fieldPath: metadata.namespace
      ports:
        - name: debug
          containerPort: {{ .Values.debug.port }}
          protocol: TCP
      livenessProbe:
        httpGet:
          path: /healthz
          port: debug
        periodSeconds: 10
        failureThreshold: 3
      readinessProbe:
        httpGet:
          path: /readyz
          port: debug
        periodSeconds: 5
        failureThreshold: 2
      resources:
        {{- toYaml .Values.resources | nindent 8 }}
      securityContext:
        {{- toYaml .Values.securityContext | nindent 8 }}
      volumeMounts:
        - name: gate-config
          mountPath: /etc/kura-health-agent
          readOnly: true
  volumes:
    - name: gate-config
      configMap:
        name: {{ include "kha.fullname" . }}-gate
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}

{{/*
Refuses mode daemonset on more nodes than daemonset.maxNodes: every node's
agent is a Lease member watching every other member's Lease, so the API
server sends N x N/5 Lease watch events a second at leaseDuration 15s
(renewed every 5 s). Counts the nodes matching nodeSelector, as the cluster
has them (lookup: helm install and upgrade, and --dry-run=server; helm
template reads no cluster and so does not check).
*/}}
{{- define "kha.validateDaemonSetNodes" -}}
{{- if eq .Values.mode "daemonset" }}
{{- $nodes := lookup "v1" "Node" "" "" }}
{{- if $nodes }}
{{- $count := 0 }}
{{- range $node := ($nodes.items | default list) }}
{{- $labels := $node.metadata.labels | default dict }}
{{- $match := true }}
{{- range $k, $v := ($.Values.nodeSelector | default dict) }}
{{- if ne (toString (get $labels $k)) (toString $v) }}{{- $match = false }}{{- end }}
{{- end }}
{{- if $match }}{{- $count = add1 $count }}{{- end }}
{{- end }}
{{- $max := int .Values.daemonset.maxNodes }}
{{- if gt $count $max }}
{{- $lease := 15 }}
{{- $writes := div (mul $count 3) $lease }}
{{- fail (printf "mode daemonset on %d nodes (daemonset.maxNodes is %d): every node's agent holds a Lease that every other node's agent watches, so Lease watch events grow with the square of the nodes (at leaseDuration 15s: 100 nodes make 20 Lease writes/s and 2,000 watch events/s, 1,000 nodes 200 writes/s and 200,000 events/s; these %d nodes about %d writes/s and %d events/s). Use mode: deployment with sharding.enabled=true and replicaCount 2 or more instead: the replicas share the instances and their Lease traffic does not grow with the nodes. Or raise daemonset.maxNodes knowingly (with sharding.leaseDuration=60s for a quarter of the traffic)" $count $max $count $writes (mul $count $writes)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
