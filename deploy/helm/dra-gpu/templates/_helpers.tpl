{{/* The chart's name: nameOverride or "dra-gpu". */}}
{{- define "dra-gpu.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The prefix of every object's name: fullnameOverride, else the release name
(with the chart's name appended unless the release name holds it). */}}
{{- define "dra-gpu.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := include "dra-gpu.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "dra-gpu.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride }}
{{- end }}

{{/* Labels of every object: Helm's recommended ones and the Kustomize tree's part-of. */}}
{{- define "dra-gpu.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: {{ include "dra-gpu.name" . }}
{{- end }}

{{/* The selector label of one component's pods: (dict "context" $ "component" "webhook"). */}}
{{- define "dra-gpu.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dra-gpu.fullname" .context }}-{{ .component }}
{{- end }}

{{- define "dra-gpu.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion | toString) }}
{{- end }}

{{- define "dra-gpu.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (printf "%s-kubelet-plugin" (include "dra-gpu.fullname" .)) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "dra-gpu.webhookServiceAccountName" -}}
{{- if .Values.webhook.serviceAccount.create }}
{{- default (printf "%s-webhook" (include "dra-gpu.fullname" .)) .Values.webhook.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.webhook.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The plugin's --kubelet-root: the directory holding NVIDIA's two kubelet paths. */}}
{{- define "dra-gpu.kubeletRoot" -}}
{{- dir (trimSuffix "/" .Values.kubeletPlugin.kubeletPluginsDirectoryPath) }}
{{- end }}

{{/* A feature gate's value as "true", "false", or "" when it is not set. */}}
{{- define "dra-gpu.gate" -}}
{{- $gates := .context.Values.featureGates | default dict }}
{{- if hasKey $gates .name }}{{ index $gates .name | toString }}{{ end }}
{{- end }}

{{- define "dra-gpu.dynamicMig" -}}
{{- if or .Values.dynamicMig (eq (include "dra-gpu.gate" (dict "context" . "name" "DynamicMIG")) "true") }}true{{ end }}
{{- end }}

{{/* VFIO passthrough: passthrough, or NVIDIA's PassthroughSupport gate. */}}
{{- define "dra-gpu.passthrough" -}}
{{- if or .Values.passthrough (eq (include "dra-gpu.gate" (dict "context" . "name" "PassthroughSupport")) "true") }}true{{ end }}
{{- end }}

{{- define "dra-gpu.deviceMetadata" -}}
{{- if or .Values.deviceMetadata (eq (include "dra-gpu.gate" (dict "context" . "name" "DeviceMetadata")) "true") }}true{{ end }}
{{- end }}

{{/* dra-gpu's global flags (before the command): debug logging, log format. */}}
{{- define "dra-gpu.globalFlags" -}}
{{- if ge (int .Values.logVerbosity) 6 }}
- -v
{{- end }}
{{- if eq .Values.logFormat "json" }}
- --log-format=json
{{- end }}
{{- end }}

{{/* The port of kubeletPlugin.metrics.gpuHttpEndpoint ("HOST:PORT" or ":PORT"). */}}
{{- define "dra-gpu.metricsPort" -}}
{{- splitList ":" (toString .Values.kubeletPlugin.metrics.gpuHttpEndpoint) | last }}
{{- end }}

{{/* Environment both node daemons share: where the driver root is on the host and here. */}}
{{- define "dra-gpu.driverRootEnv" -}}
- name: NVIDIA_DRIVER_ROOT
  value: {{ .Values.nvidiaDriverRoot | quote }}
- name: DRIVER_ROOT_CTR_PATH
  value: /driver-root
- name: NVIDIA_VISIBLE_DEVICES
  value: void
{{- end }}

{{- define "dra-gpu.driverRootVolume" -}}
- name: driver-root
  hostPath:
    path: {{ .Values.nvidiaDriverRoot | quote }}
    {{- if ne .Values.nvidiaDriverRoot "/" }}
    type: DirectoryOrCreate
    {{- end }}
{{- end }}

{{/* Where the node daemons run: the kubelet plugin's scheduling values. */}}
{{- define "dra-gpu.nodePlacement" -}}
{{- with .Values.kubeletPlugin.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.kubeletPlugin.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.kubeletPlugin.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.kubeletPlugin.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.kubeletPlugin.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* nvidia-cdi-hook on the host: nvidiaCDIHookPath, else the GPU Operator's toolkit when the
driver root is the Operator's, else "" (the plugin's default, /usr/bin/nvidia-cdi-hook). */}}
{{- define "dra-gpu.cdiHookPath" -}}
{{- if .Values.nvidiaCDIHookPath }}
{{- .Values.nvidiaCDIHookPath }}
{{- else if eq (trimSuffix "/" .Values.nvidiaDriverRoot) "/run/nvidia/driver" }}
{{- "/usr/local/nvidia/toolkit/nvidia-cdi-hook" }}
{{- end }}
{{- end }}

{{/* An update strategy: rollingUpdate only with type RollingUpdate (Helm merges a user's
{type: OnDelete} or {type: Recreate} with the default's rollingUpdate, which the API refuses). */}}
{{- define "dra-gpu.strategy" -}}
{{- $type := .type | default "RollingUpdate" }}
type: {{ $type }}
{{- if and (eq $type "RollingUpdate") .rollingUpdate }}
rollingUpdate:
  {{- toYaml .rollingUpdate | nindent 2 }}
{{- end }}
{{- end }}

{{/* ComputeDomains (resources.computeDomains.enabled): "true" or "". */}}
{{- define "dra-gpu.computeDomains" -}}
{{- if .Values.resources.computeDomains.enabled }}true{{ end }}
{{- end }}

{{/* Host-managed IMEX (resources.computeDomains.imex.mode=hostManaged): "true" or "". */}}
{{- define "dra-gpu.hostManagedImex" -}}
{{- if eq .Values.resources.computeDomains.imex.mode "hostManaged" }}true{{ end }}
{{- end }}

{{/* A leader-election duration in whole seconds: NVIDIA's "15s", or 15. */}}
{{- define "dra-gpu.seconds" -}}
{{- trimSuffix "s" (toString .) }}
{{- end }}


{{/*
IMEX indices per clique, which the controller and the IMEX host must agree on
(the CD plugin does not read it): resources.computeDomains.maxNodesPerImexDomain,
else a MAX_NODES_PER_IMEX_DOMAIN in controller.containers.computeDomain.env
(where NVIDIA's chart takes it), else 18. Both get it as a flag, which beats the env.
*/}}
{{- define "dra-gpu.maxNodesPerImexDomain" -}}
{{- $value := int .Values.resources.computeDomains.maxNodesPerImexDomain }}
{{- range (.Values.controller.containers.computeDomain.env | default list) }}
{{- if eq (toString .name) "MAX_NODES_PER_IMEX_DOMAIN" }}
{{- $env := int (toString .value) }}
{{- if lt $env 1 }}
{{- fail (printf "controller.containers.computeDomain.env MAX_NODES_PER_IMEX_DOMAIN %q: a whole number of nodes, at least 1" (toString .value)) }}
{{- end }}
{{- if and (ne $value 18) (ne $env $value) }}
{{- fail (printf "controller.containers.computeDomain.env MAX_NODES_PER_IMEX_DOMAIN=%d and resources.computeDomains.maxNodesPerImexDomain=%d disagree: set one" $env $value) }}
{{- end }}
{{- $value = $env }}
{{- end }}
{{- end }}
{{- $value }}
{{- end }}
