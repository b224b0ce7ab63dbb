{{/*
What the NetworkPolicy and the RBAC derive from the values the agent itself
runs with (watch.namespaces, watch.podSelector, poll.port/portName), so that
changing one can never silently stop polling; and the guards that refuse
renderings which would.
*/}}

{{/*
watch.podSelector (kubectl label-selector syntax, the agent's --pod-selector)
as a Kubernetes LabelSelector in YAML: `k=v`/`k==v` -> matchLabels,
`k!=v` -> NotIn, `k in (..)`/`k notin (..)` -> In/NotIn, `k` -> Exists,
`!k` -> DoesNotExist; empty -> {} (every pod). Anything else fails rendering:
the policy must select exactly the pods the agent polls.
*/}}
{{- define "kha.podLabelSelector" -}}
{{- $selector := trim (.Values.watch.podSelector | default "") -}}
{{- $labels := dict -}}
{{- $expressions := list -}}
{{- $key := "[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?" -}}
{{- $value := "[-A-Za-z0-9_.]*" -}}
{{- $usage := "use kubectl label-selector syntax: k=v, k!=v, k in (a,b), k notin (a,b), k, !k, comma-separated" -}}
{{- if $selector -}}
{{- $requirements := regexFindAll "(?:[^,(]|\\([^)]*\\))+" $selector -1 -}}
{{- if ne (join "," $requirements) $selector -}}
{{- fail (printf "watch.podSelector %q cannot be read: %s" $selector $usage) -}}
{{- end -}}
{{- range $requirements -}}
{{- $r := trim . -}}
{{- if regexMatch (printf "^(%s)\\s*==?\\s*(%s)$" $key $value) $r -}}
{{- $k := regexReplaceAll (printf "^(%s)\\s*==?\\s*(%s)$" $key $value) $r "${1}" -}}
{{- $v := regexReplaceAll (printf "^(%s)\\s*==?\\s*(%s)$" $key $value) $r "${3}" -}}
{{- if hasKey $labels $k -}}
{{- $expressions = append $expressions (dict "key" $k "operator" "In" "values" (list $v)) -}}
{{- else -}}
{{- $_ := set $labels $k $v -}}
{{- end -}}
{{- else if regexMatch (printf "^(%s)\\s*!=\\s*(%s)$" $key $value) $r -}}
{{- $k := regexReplaceAll (printf "^(%s)\\s*!=\\s*(%s)$" $key $value) $r "${1}" -}}
{{- $v := regexReplaceAll (printf "^(%s)\\s*!=\\s*(%s)$" $key $value) $r "${3}" -}}
{{- $expressions = append $expressions (dict "key" $k "operator" "NotIn" "values" (list $v)) -}}
{{- else if regexMatch (printf "^(%s)\\s+(in|notin)\\s*\\(([^)]*)\\)$" $key) $r -}}
{{- $pattern := printf "^(%s)\\s+(in|notin)\\s*\\(([^)]*)\\)$" $key -}}
{{- $k := regexReplaceAll $pattern $r "${1}" -}}
{{- $op := ternary "In" "NotIn" (eq (regexReplaceAll $pattern $r "${3}") "in") -}}
{{- $values := list -}}
{{- range splitList "," (regexReplaceAll $pattern $r "${4}") -}}
{{- $v := trim . -}}
{{- if not (regexMatch (printf "^%s$" $value) $v) -}}
{{- fail (printf "watch.podSelector: value %q in %q is not a label value" $v $r) -}}
{{- end -}}
{{- if $v -}}{{- $values = append $values $v -}}{{- end -}}
{{- end -}}
{{- if not $values -}}
{{- fail (printf "watch.podSelector: %q lists no values" $r) -}}
{{- end -}}
{{- $expressions = append $expressions (dict "key" $k "operator" $op "values" $values) -}}
{{- else if regexMatch (printf "^!\\s*(%s)$" $key) $r -}}
{{- $expressions = append $expressions (dict "key" (regexReplaceAll (printf "^!\\s*(%s)$" $key) $r "${1}") "operator" "DoesNotExist") -}}
{{- else if regexMatch (printf "^(%s)$" $key) $r -}}
{{- $expressions = append $expressions (dict "key" $r "operator" "Exists") -}}
{{- else -}}
{{- fail (printf "watch.podSelector: cannot read %q (%s)" $r $usage) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $out := dict -}}
{{- if $labels -}}{{- $_ := set $out "matchLabels" $labels -}}{{- end -}}
{{- if $expressions -}}{{- $_ := set $out "matchExpressions" $expressions -}}{{- end -}}
{{- if $out -}}{{- toYaml $out -}}{{- else -}}{}{{- end -}}
{{- end -}}

{{/* The namespaces the agent polls, as a namespaceSelector ({}: all). */}}
{{- define "kha.pollNamespaceSelector" -}}
{{- $namespaces := compact .Values.watch.namespaces -}}
{{- if $namespaces -}}
matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: In
    values:
      {{- toYaml $namespaces | nindent 6 }}
{{- else -}}
{}
{{- end -}}
{{- end -}}

{{/* The port the agent polls: the named port when set, else the number. */}}
{{- define "kha.pollPort" -}}
{{- .Values.poll.portName | default .Values.poll.port -}}
{{- end -}}

{{/*
The API server's CIDRs (egress), required while the NetworkPolicy is on: the
chart cannot derive them (helm template has no cluster, and a looked-up
address would silently go stale), and an empty list or a /0 would allow
egress to the whole internet.
*/}}
{{- define "kha.apiServerCidrs" -}}
{{- $cidrs := compact (.Values.networkPolicy.apiServer.cidrs | default list) -}}
{{- if not $cidrs -}}
{{- fail "networkPolicy.apiServer.cidrs is required while networkPolicy.enabled is true: list the Kubernetes API server's addresses (kubectl get endpointslices -n default -l kubernetes.io/service-name=kubernetes -o jsonpath='{.items[*].endpoints[*].addresses[*]}'), e.g. --set 'networkPolicy.apiServer.cidrs={10.0.0.10/32}', or set networkPolicy.enabled=false" -}}
{{- end -}}
{{- range $cidrs -}}
{{- if not (regexMatch "^[0-9A-Fa-f.:]+/[0-9]{1,3}$" .) -}}
{{- fail (printf "networkPolicy.apiServer.cidrs: %q is not a CIDR (address/prefix, e.g. 10.0.0.10/32)" .) -}}
{{- end -}}
{{- if hasSuffix "/0" . -}}
{{- fail (printf "networkPolicy.apiServer.cidrs: %q allows egress to every address; list the API server's own addresses" .) -}}
{{- end -}}
{{- end -}}
{{- toYaml $cidrs -}}
{{- end -}}

{{/*
Guards: no release in kube-system (the Lease Role would grant update/delete
on the control plane's leader-election Leases); no extraArgs overriding a
flag the NetworkPolicy or RBAC is derived from; no values of the chart's
earlier hand-written pod selector.
*/}}
{{- define "kha.validateDerived" -}}
{{- if eq .Release.Namespace "kube-system" -}}
{{- fail "refusing to install into kube-system: the agent's Lease Role would grant update and delete on the control plane's leader-election Leases there; install into a dedicated namespace (e.g. -n kura-system --create-namespace)" -}}
{{- end -}}
{{- range .Values.extraArgs -}}
{{- if regexMatch "^--(port|port-name|pod-selector|namespace|debug-listen|publication-target)([=\\s]|$)" (toString .) -}}
{{- fail (printf "extraArgs %q: set it through the chart's values (poll.port, poll.portName, watch.podSelector, watch.namespaces, debug.port, publication.target): the NetworkPolicy and RBAC are derived from them" .) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The agent's rules on the instances it watches, for the ClusterRole (all
namespaces) or each watched namespace's Role: read pods and KuraInstances;
write where publication.target publishes, nothing else:
  instance:  patch kurainstances/status (server-side apply on the status);
  companion: its own KuraInstanceHealths (read, create and patch them by
             server-side apply, patch their status), never kurainstances;
  auto:      both (decided at start), plus the CRD read (kha.crdReadRules).
*/}}
{{/*
What each replica watches (--shard-pod-selection): sharding.podSelection,
where auto is instance-label (its own watch units) when the release runs
more than one agent (replicaCount above 1, or mode daemonset) and all for
a single replica (two watches instead of one per unit, no label needed).
*/}}
{{- define "kha.podSelection" -}}
{{- $s := .Values.sharding.podSelection -}}
{{- if eq $s "auto" -}}
{{- if or (eq .Values.mode "daemonset") (gt (int .Values.replicaCount) 1) -}}
instance-label
{{- else -}}
all
{{- end -}}
{{- else -}}
{{ $s }}
{{- end -}}
{{- end -}}

{{/*
"true" when the agent stamps the shard label on instances: sharding by unit
(sharding.enabled, kha.podSelection other than all) with
sharding.stampLabels.
*/}}
{{- define "kha.stampsLabels" -}}
{{- if and .Values.sharding.enabled .Values.sharding.stampLabels (ne (include "kha.podSelection" .) "all") -}}
true
{{- end -}}
{{- end -}}

{{- define "kha.watchRules" -}}
{{- $target := .Values.publication.target -}}
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["kura.tuist.dev"]
  resources: ["kurainstances"]
  {{- if include "kha.stampsLabels" . }}
  # patch: the shard label on instances that lack it (sharding by unit),
  # server-side applied under the agent's own field manager.
  verbs: ["get", "list", "watch", "patch"]
  {{- else }}
  verbs: ["get", "list", "watch"]
  {{- end }}
{{- if ne $target "companion" }}
- apiGroups: ["kura.tuist.dev"]
  resources: ["kurainstances/status"]
  verbs: ["patch"]
{{- end }}
{{- if ne $target "instance" }}
- apiGroups: ["health.kura.tuist.dev"]
  resources: ["kurainstancehealths"]
  verbs: ["get", "list", "watch", "create", "patch"]
- apiGroups: ["health.kura.tuist.dev"]
  resources: ["kurainstancehealths/status"]
  verbs: ["patch"]
{{- end }}
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- if .Values.nodeLocal.enabled }}
# Node-local instances' pods are polled through their port-forward: the
# agent's websocket upgrade is a GET (authorized as `get`); `create` is the
# verb of the SPDY form (a POST), the one the contract names.
- apiGroups: [""]
  resources: ["pods/portforward"]
  verbs: ["get", "create"]
{{- end }}
{{- end -}}

{{/*
publication.target auto: at start the agent reads the installed KuraInstance
CRD (does it declare status.rolloutGate?). CRDs are cluster-scoped, so this
is a ClusterRole of its own even when watch.namespaces is set: `get` on that
one CRD by name, nothing else.
*/}}
{{- define "kha.crdReadRules" -}}
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  resourceNames: ["kurainstances.kura.tuist.dev"]
  verbs: ["get"]
{{- end -}}
