{{/* Prefix of every object name; cluster-scoped objects (ClusterRoles) carry it too, so releases never collide. */}}
{{- define "mbf.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains "model-backfill" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (.Values.nameOverride | default "model-backfill") | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "mbf.functions" -}}source demand admit cancel lifecycle{{- end -}}

{{- define "mbf.labels" -}}
app.kubernetes.io/name: model-backfill
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: model-backfill
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Pod selector of one component: (dict "root" . "component" "demand") */}}
{{- define "mbf.selector" -}}
app.kubernetes.io/name: model-backfill
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The image by digest when image.digest is set (what a release bundle pins), else by tag. */}}
{{- define "mbf.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* The users the chosen mode runs (each needs a NATS credential). */}}
{{- define "mbf.natsUsers" -}}
{{- $users := list "source" "demand" "admit" "cancel" "lifecycle" "provision" -}}
{{- if .Values.ingress.enabled }}{{ $users = append $users "ingress" }}{{ end -}}
{{- if eq .Values.mode "knative" }}{{ $users = append $users "bridge" }}{{ end -}}
{{- join " " $users -}}
{{- end -}}

{{/*
A NATS user's credential: (dict "root" . "user" "demand") → dict secret, key, file (the env var naming the mounted
file), items (whether to mount only that key). Each user has a Secret of its own holding one NKey seed (or a JWT
.creds file): the chart's `<fullname>-nats-<user>` made from `seed`, or `existingSecret`. Passwords are refused.
*/}}
{{- define "mbf.natsCredential" -}}
{{- $c := index .root.Values.nats.credentials .user | default dict -}}
{{- if $c.password -}}
{{- fail (printf "nats.credentials.%s.password: NATS users are NKey-only now (deploy/nats/auth.conf); give seed or existingSecret (deploy/nats/README.md)" .user) -}}
{{- end -}}
{{- $format := $c.format | default "nkey" -}}
{{- if not (has $format (list "nkey" "creds")) -}}
{{- fail (printf "nats.credentials.%s.format must be nkey or creds, not %q" .user $format) -}}
{{- end -}}
{{- $file := ternary "NATS_CREDS_FILE" "NATS_NKEY_SEED_FILE" (eq $format "creds") -}}
{{- if $c.existingSecret -}}
{{- toJson (dict "secret" $c.existingSecret "key" ($c.key | default "seed") "file" $file "items" true) -}}
{{- else -}}
{{- if not $c.seed -}}
{{- fail (printf "nats.credentials.%s: set seed (an NKey seed, SU...) or existingSecret (and key)" .user) -}}
{{- end -}}
{{- if not (hasPrefix "SU" $c.seed) -}}
{{- fail (printf "nats.credentials.%s.seed is not an NKey user seed (SU...): npm run gen:secrets -- --format helm makes them all" .user) -}}
{{- end -}}
{{- toJson (dict "secret" (printf "%s-nats-%s" (include "mbf.fullname" .root) .user) "key" "seed" "file" "NATS_NKEY_SEED_FILE" "items" false) -}}
{{- end -}}
{{- end -}}

{{/* The env every NATS client shares: (dict "root" . "user" "demand") */}}
{{- define "mbf.natsEnv" -}}
{{- $cred := include "mbf.natsCredential" . | fromJson -}}
- name: LOG_LEVEL
  valueFrom:
    configMapKeyRef:
      name: {{ include "mbf.fullname" .root }}-config
      key: LOG_LEVEL
- name: NATS_HOST
  valueFrom:
    configMapKeyRef:
      name: {{ include "mbf.fullname" .root }}-config
      key: NATS_HOST
# This function's own NATS identity, from its own Secret; the user in NATS_URL only names its reply inbox prefix.
- name: {{ $cred.file }}
  value: /var/run/secrets/model-backfill-nats/seed
- name: NATS_URL
  value: nats://{{ .user }}@$(NATS_HOST)
{{- with .root.Values.watchNamespaces }}
- name: WATCH_NAMESPACES
  value: {{ join "," . | quote }}
{{- end }}
{{- end -}}

{{/* admit's background gate settings (docs/gate.md), from the config when gate.enabled: (dict "root" .) */}}
{{- define "mbf.gateEnv" -}}
# The background gate admit injects into backfills that opt in (docs/gate.md): both set, or it is off and
# opted-in backfills block. dev/scripts/install.sh sets them (MBF_GATE_NAMESPACES) in model-backfill-config.
- name: GATE_IMAGE
  valueFrom:
    configMapKeyRef:
      name: {{ include "mbf.fullname" .root }}-config
      key: GATE_IMAGE
      optional: true
- name: GATE_NATS_URL
  valueFrom:
    configMapKeyRef:
      name: {{ include "mbf.fullname" .root }}-config
      key: GATE_NATS_URL
      optional: true
{{- end -}}

{{/* The volumeMount and volume of a NATS user's Secret: (dict "root" . "user" "demand") */}}
{{- define "mbf.natsVolumeMount" -}}
- name: nats-seed
  mountPath: /var/run/secrets/model-backfill-nats
  readOnly: true
{{- end -}}
{{- define "mbf.natsVolume" -}}
{{- $cred := include "mbf.natsCredential" . | fromJson -}}
- name: nats-seed
  secret:
    secretName: {{ $cred.secret }}
    {{- if $cred.items }}
    # Only this user's key, whatever else the Secret holds.
    items:
      - key: {{ $cred.key }}
        path: seed
    {{- end }}
{{- end -}}

{{- define "mbf.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 1000
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "mbf.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}


{{/*
Pod settings a platform team sets for every pod of the release (top-level values) or for one component (the same keys
under functions.<name>, ingress, knative.bridge, provision). A component's own nodeSelector, affinity, tolerations,
topologySpreadConstraints, imagePullSecrets and priorityClassName replace the top-level ones; its podLabels,
podAnnotations and extraEnv are added to them (same key or name: the component's wins).
*/}}

{{/* The env names the chart sets itself: an extraEnv entry with one of them would be a duplicate the apiserver refuses. */}}
{{- define "mbf.ownEnv" -}}
BRIDGE_SINK_TOKEN_FILE FUNCTION GATE_IMAGE GATE_NATS_URL HOST HTTP_AUTH HTTP_AUTH_AUDIENCE HTTP_AUTH_TOKEN_FILE
INGRESS_TOKEN_FILE LOG_LEVEL NATS_CREDS_FILE NATS_HOST NATS_NKEY_SEED_FILE NATS_PROVISION NATS_REPLICAS NATS_URL PORT
PROVISION_CONSUMERS TRANSPORT WATCH WATCH_NAMESPACES
{{- if .Values.ingress.enabled }} INGRESS_READY_URL{{ end -}}
{{- end -}}

{{/* extraEnv entries (top-level, then the component's): (dict "root" . "c" <component values> "name" "functions.demand") */}}
{{- define "mbf.extraEnv" -}}
{{- $root := .root -}}
{{- $where := .name -}}
{{- $own := splitList " " (include "mbf.ownEnv" $root | replace "\n" " ") -}}
{{- $byName := dict -}}
{{- $order := list -}}
{{- range $i, $e := concat ($root.Values.extraEnv | default list) ((.c | default dict).extraEnv | default list) -}}
{{- if not (kindIs "map" $e) -}}
{{- fail (printf "extraEnv (%s): each entry is an EnvVar ({name: NAME, value: ...} or valueFrom), not %v" $where $e) -}}
{{- end -}}
{{- if not $e.name -}}
{{- fail (printf "extraEnv (%s): an entry has no name" $where) -}}
{{- end -}}
{{- if has $e.name $own -}}
{{- fail (printf "extraEnv (%s): %s is set by the chart itself; set it through its value in values.yaml" $where $e.name) -}}
{{- end -}}
{{- if not (hasKey $byName $e.name) }}{{ $order = append $order $e.name }}{{ end -}}
{{- $_ := set $byName $e.name $e -}}
{{- end -}}
{{- range $order }}
- {{ toYaml (get $byName .) | nindent 2 | trim }}
{{- end -}}
{{- end -}}

{{/* The pod's labels beyond the selector: (dict "root" . "c" <component values>) */}}
{{- define "mbf.podLabels" -}}
{{- $labels := merge (deepCopy ((.c | default dict).podLabels | default dict)) (.root.Values.podLabels | default dict) -}}
{{- range $k := list "app.kubernetes.io/name" "app.kubernetes.io/instance" "app.kubernetes.io/component" "app.kubernetes.io/part-of" -}}
{{- if hasKey $labels $k -}}
{{- fail (printf "podLabels: %s is the chart's own label (the pod selector); choose another key" $k) -}}
{{- end -}}
{{- end -}}
{{- with $labels }}
{{ toYaml . }}
{{- end -}}
{{- end -}}

{{/* The pod's annotations: the chart's own (dict "own" {...}) with podAnnotations over them, or nothing. */}}
{{- define "mbf.podAnnotations" -}}
{{- $ann := merge (deepCopy ((.c | default dict).podAnnotations | default dict)) (.root.Values.podAnnotations | default dict) (.own | default dict) -}}
{{- with $ann }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end -}}
{{- end -}}

{{/* Scheduling and pull secrets of a pod spec: (dict "root" . "c" <component values> "component" "demand") */}}
{{- define "mbf.podScheduling" -}}
{{- $v := .root.Values -}}
{{- $c := .c | default dict -}}
{{- with ($c.imagePullSecrets | default $v.imagePullSecrets) }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with ($c.priorityClassName | default $v.priorityClassName) }}
priorityClassName: {{ . }}
{{- end }}
{{- with ($c.nodeSelector | default $v.nodeSelector) }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with ($c.affinity | default $v.affinity) }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with ($c.tolerations | default $v.tolerations) }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- /* A constraint without a labelSelector spreads this component's own pods: what "spread over nodes" means. */}}
{{- $spread := list -}}
{{- range ($c.topologySpreadConstraints | default $v.topologySpreadConstraints) -}}
{{- $t := deepCopy . -}}
{{- if not (hasKey $t "labelSelector") -}}
{{- $_ := set $t "labelSelector" (dict "matchLabels" (include "mbf.selector" (dict "root" $.root "component" $.component) | fromYaml)) -}}
{{- end -}}
{{- $spread = append $spread $t -}}
{{- end -}}
{{- with $spread }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
