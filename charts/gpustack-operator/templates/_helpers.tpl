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

{{/* The operator's namespace is fixed: every component reads its Settings, Lease and NodeFeatures there. */}}
{{- define "gpustack.namespace" -}}
{{- if ne .Release.Namespace "gpustack-system" -}}
{{- fail (printf "install into the namespace gpustack-system, not %q: helm install %s charts/gpustack-operator -n gpustack-system --create-namespace" .Release.Namespace .Release.Name) -}}
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
v0.18, unless the value overrides it) and gpustack.kueueNodeCredits (the release lacks the fix of
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
{{- define "gpustack.kueueNodeCredits" -}}
{{- $v := include "gpustack.kueueVersion" . -}}
{{- if or (semverCompare "<0.17.5-0" $v) (semverCompare "~0.18.0-0, <0.18.1-0" $v) -}}true{{- end -}}
{{- end -}}


{{/* A cleanup hook of `helm uninstall`: ServiceAccount, ClusterRole (.rules, YAML) and its binding,
and the Job running `gpustack-operator cleanup <.flag>` as the operator image's user. .when is the
hook (pre-delete, post-delete); .name the objects' name. */}}
{{- define "gpustack.cleanupHook" -}}
{{- $root := .root }}
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
    metadata:
      labels:
        {{- include "gpustack.selector" (dict "root" $root "component" "cleanup") | nindent 8 }}
    spec:
      serviceAccountName: {{ .name }}
      restartPolicy: Never
      {{- include "gpustack.pullSecrets" $root | nindent 6 }}
      {{- include "gpustack.nodeSelector" (dict "root" $root "own" $root.Values.cleanup.nodeSelector) | nindent 6 }}
      {{- with $root.Values.cleanup.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        seccompProfile: {type: RuntimeDefault}
      containers:
        - name: cleanup
          image: {{ include "gpustack.image" (dict "root" $root "image" $root.Values.cleanup.image) }}
          imagePullPolicy: {{ include "gpustack.pullPolicy" (dict "root" $root "image" $root.Values.cleanup.image) }}
          command: [gpustack-operator]
          args:
            - cleanup
            - {{ .flag }}
            - --worker-selector=app.kubernetes.io/instance={{ $root.Release.Name }},app.kubernetes.io/component=worker
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities: {drop: [ALL]}
{{- end -}}
