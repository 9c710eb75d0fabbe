{{/* Names ---------------------------------------------------------------------------------- */}}

{{- define "gpustack.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpustack.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains (include "gpustack.name" .) .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "gpustack.name" .) | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gpustack.worker" -}}{{ include "gpustack.fullname" . }}-worker{{- end -}}
{{- define "gpustack.deviceManager" -}}{{ include "gpustack.fullname" . }}-device-manager{{- end -}}
{{- define "gpustack.modelManager" -}}{{ include "gpustack.fullname" . }}-model-manager{{- end -}}
{{- define "gpustack.cleanup" -}}{{ include "gpustack.fullname" . }}-cleanup{{- end -}}
{{- define "gpustack.certSecret" -}}{{ include "gpustack.worker" . }}-certs{{- end -}}

{{/* The operator's namespace is fixed: its components read their Settings, Lease, certificate Secret
and NodeFeatures there and the webhooks name the worker's Service there (api/constants.py
SYSTEM_NAMESPACE, compiled into the operator), so a release elsewhere would not work: refused. */}}
{{- define "gpustack.namespace" -}}
{{- if ne .Release.Namespace "gpustack-system" -}}
{{- fail (printf "install into the namespace gpustack-system, not %q: the operator keeps its Settings, leader Lease and certificate Secret there and registers its webhooks at a Service there, a namespace compiled into it (api/constants.py); helm install %s charts/gpustack-operator -n gpustack-system --create-namespace" .Release.Namespace .Release.Name) -}}
{{- end -}}
{{- .Release.Namespace -}}
{{- end -}}

{{/* Labels ---------------------------------------------------------------------------------- */}}

{{- define "gpustack.labels" -}}
app.kubernetes.io/name: {{ include "gpustack.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpustack-operator
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "gpustack.selector" -}}
app.kubernetes.io/name: {{ include "gpustack.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* A Pod template's metadata: .labels (a dict, the component's own labels, which win over a clash)
with the component's podLabels, and its podAnnotations; .values is the component's values block.
Values are quoted, as label and annotation values must be strings. */}}
{{- define "gpustack.podMetadata" -}}
{{- $labels := merge (dict) .labels (.values.podLabels | default dict) -}}
metadata:
  labels:
    {{- range $key, $value := $labels }}
    {{ $key | quote }}: {{ $value | toString | quote }}
    {{- end }}
  {{- with .values.podAnnotations }}
  annotations:
    {{- range $key, $value := . }}
    {{ $key | quote }}: {{ $value | toString | quote }}
    {{- end }}
  {{- end }}
{{- end -}}

{{/* A component's labels as a dict: the chart's own and app.kubernetes.io/component. */}}
{{- define "gpustack.componentLabels" -}}
{{- $labels := include "gpustack.labels" .root | fromYaml -}}
{{- $_ := set $labels "app.kubernetes.io/component" .component -}}
{{- toYaml $labels -}}
{{- end -}}

{{- define "gpustack.annotations" -}}
{{- with .Values.commonAnnotations }}
annotations:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Images: registry and namespace overrides, then the component's own block over the chart's. */}}
{{- define "gpustack.image" -}}
{{- $root := .root -}}
{{- $own := .image | default dict -}}
{{- $repository := $own.repository | default $root.Values.image.repository -}}
{{- $tag := $own.tag | default $root.Values.image.tag | default (printf "v%s" $root.Chart.AppVersion) -}}
{{- $parts := splitList "/" $repository -}}
{{- if and $root.Values.global.imageNamespace (gt (len $parts) 1) -}}
{{- $parts = concat (initial (initial $parts)) (list $root.Values.global.imageNamespace (last $parts)) -}}
{{- end -}}
{{- $path := join "/" $parts -}}
{{- if $root.Values.global.imageRegistry -}}
{{- printf "%s/%s:%s" (trimSuffix "/" $root.Values.global.imageRegistry) $path $tag -}}
{{- else -}}
{{- printf "%s:%s" $path $tag -}}
{{- end -}}
{{- end -}}

{{- define "gpustack.pullPolicy" -}}
{{- $own := .image | default dict -}}
{{- .root.Values.global.imagePullPolicy | default $own.pullPolicy | default .root.Values.image.pullPolicy -}}
{{- end -}}

{{- define "gpustack.pullSecrets" -}}
{{- with .Values.global.imagePullSecrets }}
imagePullSecrets:
{{- range . }}
{{- if kindIs "string" . }}
  - name: {{ . }}
{{- else }}
  - {{ toYaml . | nindent 4 | trim }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Settings seeds from global.* (operations spec D.8: GPUSTACK_<SETTING>, read once at the first
start): the registry, namespace, pull secrets and pull policy of the images the operator starts at
run time, as the chart's own images get them, unless worker.env seeds the same Setting. */}}
{{- define "gpustack.imageSettingsEnv" -}}
{{- $g := .Values.global -}}
{{- $secrets := list -}}
{{- range $g.imagePullSecrets -}}
{{- if kindIs "string" . }}{{ $secrets = append $secrets . }}{{ else }}{{ $secrets = append $secrets .name }}{{ end -}}
{{- end -}}
{{- $seeds := dict
    "GPUSTACK_CONTAINER_REGISTRY" (trimSuffix "/" ($g.imageRegistry | default ""))
    "GPUSTACK_CONTAINER_NAMESPACE" (trimAll "/" ($g.imageNamespace | default ""))
    "GPUSTACK_IMAGE_PULL_SECRETS" (join "," $secrets)
    "GPUSTACK_IMAGE_PULL_POLICY" ($g.imagePullPolicy | default "") -}}
{{- range $name, $value := $seeds }}
{{- if and $value (not (hasKey ($.Values.worker.env | default dict) $name)) }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "gpustack.nodeSelector" -}}
{{- $selector := .own | default .root.Values.global.nodeSelector -}}
{{- with $selector }}
nodeSelector:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Manufacturers: the rows not set to null, sorted by name. */}}
{{- define "gpustack.manufacturerNames" -}}
{{- $names := list -}}
{{- range $name, $row := .Values.global.manufacturers -}}
{{- if $row -}}{{- $names = append $names $name -}}{{- end -}}
{{- end -}}
{{- join "," (sortAlpha $names) -}}
{{- end -}}

{{/* GPUSTACK_<MFR>_* for every stated field of every row, and the shared deploy-time variables. */}}
{{- define "gpustack.manufacturerEnv" -}}
{{- range $name, $row := .Values.global.manufacturers }}
{{- if $row }}
{{- $prefix := printf "GPUSTACK_%s_" (upper $name) }}
{{- if $row.pciVendorID }}
- name: {{ $prefix }}PCI_VENDOR_ID
  value: {{ $row.pciVendorID | quote }}
{{- end }}
{{- if $row.resourceName }}
- name: {{ $prefix }}ACCELERATABLE_RESOURCE_NAME
  value: {{ $row.resourceName | quote }}
{{- end }}
{{- if $row.runtimeName }}
- name: {{ $prefix }}ACCELERATABLE_RUNTIME_NAME
  value: {{ $row.runtimeName | quote }}
{{- end }}
{{- if $row.partitionKind }}
- name: {{ $prefix }}PARTITION_KIND
  value: {{ $row.partitionKind | quote }}
{{- end }}
{{- end }}
{{- end }}
- name: GPUSTACK_LEDGER_RELEASE_TERMINATED_PODS
  value: {{ .Values.ledgerReleaseTerminatedPods | quote }}
- name: KUBERNETES_POD_NAMESPACE
  valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
- name: KUBERNETES_POD_NAME
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
- name: KUBERNETES_NODE_NAME
  valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
{{- end -}}

{{- define "gpustack.extraEnv" -}}
{{- range $name, $value := . }}
- name: {{ $name }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- end -}}

{{/* cert-manager: "true", true, or "auto" with its CRDs served. */}}
{{- define "gpustack.certmanager" -}}
{{- $want := .Values.global.certmanager.enabled | toString -}}
{{- if or (eq $want "true") (and (eq $want "auto") (.Capabilities.APIVersions.Has "cert-manager.io/v1")) -}}
true
{{- end -}}
{{- end -}}

{{/*
What the Kueue release named by .Values.kueue.version knows, as "true"/"" strings:
gpustack.kueueGate (the feature gate in .gate exists there; gates not listed exist in every
release this chart supports), gpustack.kueueQuotaCheckStrategy (resources.quotaCheckStrategy, from
v0.18, unless the value overrides it), gpustack.kueueWaitForPodsReady (waitForPodsReady.timeout, from
v0.19: before it the setting's presence would turn the eviction on) and gpustack.kueueNodeCredits (the release lacks the fix of
kubernetes-sigs/kueue#12005: topology-aware admission then needs credits capacity on nodes).
*/}}
{{- define "gpustack.kueueVersion" -}}
{{- trimPrefix "v" (toString .Values.kueue.version) -}}
{{- end -}}
{{- define "gpustack.kueueGate" -}}
{{- $since := dict "TASRespectNodeAffinityPreferred" "0.18.0" "QuotaCheckStrategy" "0.18.0" -}}
{{- $v := include "gpustack.kueueVersion" .root -}}
{{- if or (not (hasKey $since .gate)) (semverCompare (printf ">=%s-0" (get $since .gate)) $v) -}}true{{- end -}}
{{- end -}}
{{- define "gpustack.kueueQuotaCheckStrategy" -}}
{{- $set := .Values.kueue.quotaCheckStrategy -}}
{{- if kindIs "bool" $set -}}{{- if $set -}}true{{- end -}}
{{- else if semverCompare ">=0.18.0-0" (include "gpustack.kueueVersion" .) -}}true{{- end -}}
{{- end -}}
{{- define "gpustack.kueueWaitForPodsReady" -}}
{{- $set := .Values.kueue.waitForPodsReady -}}
{{- if and $set $set.timeout (semverCompare ">=0.19.0-0" (include "gpustack.kueueVersion" .)) -}}true{{- end -}}
{{- end -}}
{{- define "gpustack.kueueNodeCredits" -}}
{{- $v := include "gpustack.kueueVersion" . -}}
{{- if or (semverCompare "<0.17.5-0" $v) (semverCompare "~0.18.0-0, <0.18.1-0" $v) -}}true{{- end -}}
{{- end -}}


{{/* A cleanup hook of `helm uninstall`: ServiceAccount, ClusterRole (.rules, YAML) and its binding,
and the Job running `gpustack-operator cleanup <.flag>` as the operator image's user. .when is the
hook (pre-delete, post-delete); .name the objects' name. */}}
{{- define "gpustack.cleanupHook" -}}
{{- $root := .root }}
{{- $c := $root.Values.cleanup }}
{{- $ns := include "gpustack.namespace" $root }}
{{- $hook := dict "helm.sh/hook" .when "helm.sh/hook-delete-policy" "before-hook-creation,hook-succeeded" }}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ .name }}
  namespace: {{ $ns }}
  labels:
    {{- include "gpustack.labels" $root | nindent 4 }}
    app.kubernetes.io/component: cleanup
  annotations:
    {{- toYaml (merge (dict "helm.sh/hook-weight" "-10") $hook) | nindent 4 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ .name }}
  labels:
    {{- include "gpustack.labels" $root | nindent 4 }}
    app.kubernetes.io/component: cleanup
  annotations:
    {{- toYaml (merge (dict "helm.sh/hook-weight" "-10") $hook) | nindent 4 }}
rules:
  {{- .rules | nindent 2 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ .name }}
  labels:
    {{- include "gpustack.labels" $root | nindent 4 }}
    app.kubernetes.io/component: cleanup
  annotations:
    {{- toYaml (merge (dict "helm.sh/hook-weight" "-9") $hook) | nindent 4 }}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {{ .name }}}
subjects:
  - {kind: ServiceAccount, name: {{ .name }}, namespace: {{ $ns }}}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: {{ .name }}
  namespace: {{ $ns }}
  labels:
    {{- include "gpustack.labels" $root | nindent 4 }}
    app.kubernetes.io/component: cleanup
  annotations:
    {{- toYaml (merge (dict "helm.sh/hook-weight" "0") $hook) | nindent 4 }}
spec:
  backoffLimit: 2
  ttlSecondsAfterFinished: 600
  template:
    {{- include "gpustack.podMetadata" (dict "labels" (include "gpustack.selector" (dict "root" $root "component" "cleanup") | fromYaml) "values" $c) | nindent 4 }}
    spec:
      serviceAccountName: {{ .name }}
      restartPolicy: Never
      {{- with $c.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      {{- include "gpustack.pullSecrets" $root | nindent 6 }}
      {{- include "gpustack.nodeSelector" (dict "root" $root "own" $c.nodeSelector) | nindent 6 }}
      {{- with $c.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $c.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $c.podSecurityContext }}
      securityContext:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
        - name: cleanup
          image: {{ include "gpustack.image" (dict "root" $root "image" $c.image) }}
          imagePullPolicy: {{ include "gpustack.pullPolicy" (dict "root" $root "image" $c.image) }}
          command: [gpustack-operator]
          args:
            - cleanup
            - {{ .flag }}
            - --worker-selector=app.kubernetes.io/instance={{ $root.Release.Name }},app.kubernetes.io/component=worker
          {{- with $c.resources }}
          resources:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          {{- with $c.securityContext }}
          securityContext:
            {{- toYaml . | nindent 12 }}
          {{- end }}
{{- end -}}
