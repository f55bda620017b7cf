# The crawl's dashboard and alert rules, as the root reads them from infra/monitoring
# (generated and tested there): a ConfigMap that Grafana's dashboard sidecar picks up
# by its label (the kube-prometheus-stack convention), and a PrometheusRule for the
# Prometheus Operator.
locals {
  grafana_dashboard = {
    apiVersion = "v1"
    kind       = "ConfigMap"
    metadata = {
      name      = "crawl-grafana-dashboard"
      namespace = coalesce(var.grafana_dashboard_namespace, var.namespace)
      labels = {
        grafana_dashboard           = "1"
        "app.kubernetes.io/part-of" = "crawler"
      }
    }
    data = { "crawler-dashboard.json" = var.grafana_dashboard_json }
  }

  prometheus_rule = {
    apiVersion = "monitoring.coreos.com/v1"
    kind       = "PrometheusRule"
    metadata = {
      name      = "crawl-alerts"
      namespace = var.namespace
      labels    = merge({ "app.kubernetes.io/part-of" = "crawler" }, var.prometheus_rule_labels)
    }
    # alerts.yml is a Prometheus rule file: its `groups` are the CRD's spec as they are.
    spec = yamldecode(var.alert_rules_yaml)
  }
}
