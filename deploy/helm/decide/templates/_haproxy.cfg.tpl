{{/*
HAProxy's configuration (haproxy.yaml's ConfigMap; its hash rolls the router when it changes).
tests/replicas/haproxy.cfg is the same for three replicas on loopback.
*/}}
{{- define "decide.haproxyConfig" -}}
global
    maxconn 20000

resolvers kube
    parse-resolv-conf
    hold valid 5s
    accepted_payload_size 8192

defaults
    mode http
    timeout connect 2s
    timeout client 300s
    timeout server 300s
    retries 3
    option redispatch 1
    retry-on conn-failure empty-response junk-response response-timeout
    # A request is retried only from a copy held whole: wait for the whole body (decision
    # bodies are small) before sending it on.
    option http-buffer-request
    option httpchk GET /health
    http-check expect status 200
    default-server inter 1s fastinter 250ms downinter 1s fall 2 rise 2

frontend decide
    bind :8080
    default_backend replicas

backend replicas
    balance hdr(X-Decide-Affinity)
    hash-type consistent
    # Up to {{ .Values.router.maxReplicas }} replicas of all pools together, found through the
    # headless Service's DNS.
    server-template r {{ .Values.router.maxReplicas }} {{ include "decide.fullname" . }}-replicas:8080 check resolvers kube init-addr none

frontend health
    bind :8404
    http-request return status 200 content-type text/plain string ok if { path /healthz }
    stats enable
    stats uri /stats
{{- end -}}
