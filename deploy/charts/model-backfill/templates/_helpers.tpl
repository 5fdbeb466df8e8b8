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

{{- define "mbf.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
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

