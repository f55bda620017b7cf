locals {
  streams = ["discovered", "leases", "completions", "index", "deadletter", "control", "replies", "shards"]

  # The job files, relative to app_dir: the same files `python -m jobs.<name>` runs locally.
  job_files = {
    frontier = "jobs/frontier.py"
    fetcher  = "jobs/fetcher.py"
  }
  # Informational: each job sets python.execution-mode itself (frontier thread, fetcher process).
  python_modes = {
    frontier = "thread"
    fetcher  = "process"
  }
  # A savepoint upgrade may skip the state of operators the new graph dropped: only the
  # fetcher, whose state is all disposable (leases are re-let, outputs idempotent).
  allow_non_restored_state = {
    frontier = false
    fetcher  = true
  }

  storage_root = "s3://${var.bucket}"

  # The frontier's cache of live hosts (frontier.cache_urls URLs and frontier.cache_hosts
  # hosts per slot; defaults of udfs/config/crawler-default.yaml) is Python memory in its
  # TaskManager (thread mode), beside Flink's budgets: MB per slot when full, at the bytes
  # per cached URL and per host measured by bench/bench_cache_memory.py
  # (udfs/capacity-assumptions.yaml, `crawl plan`). Reserved as task off-heap memory.
  frontier_cache_mb = ceil((
    tonumber(lookup(var.settings, "frontier.cache_urls", 2000000)) * 1440 +
    tonumber(lookup(var.settings, "frontier.cache_hosts", 10000)) * 3650
  ) / 1048576)
  task_off_heap_mb = {
    frontier = var.jobs["frontier"].task_slots * local.frontier_cache_mb
    fetcher  = 0 # process mode: its Python workers live in Flink's managed memory
  }
  # What Flink then leaves each TaskManager's JVM heap: its process size less JVM
  # overhead (0.1, 192 MB to 1 GB) and metaspace (256 MB) is Flink's memory, of which
  # managed memory takes 0.4, network memory 0.1 (64 MB to 1 GB), framework memory
  # 256 MB and the task off-heap reservation above.
  taskmanager_mb = {
    for job, j in var.jobs : job =>
    tonumber(regex("^[0-9]+", j.taskmanager_memory)) * (endswith(j.taskmanager_memory, "g") ? 1024 : 1)
  }
  flink_mb = { for job, mb in local.taskmanager_mb : job => mb - min(max(mb * 0.1, 192), 1024) - 256 }
  task_heap_mb = {
    for job, mb in local.flink_mb : job =>
    floor(mb * 0.6 - min(max(mb * 0.1, 64), 1024) - 256 - local.task_off_heap_mb[job])
  }

  # Crawl configuration shared by both jobs, as dotted keys of udfs/config/crawler-default.yaml.
  # Operator settings come last so they can refine anything but the wiring below.
  common_settings = merge(
    var.settings,
    {
      "kafka.bootstrap_servers"      = var.kafka_bootstrap_servers
      "storage.backend"              = "s3"
      "s3.bucket"                    = var.bucket
      "s3.endpoint_url"              = var.s3_endpoint_url
      "s3.region"                    = var.s3_region
      "s3.path_style"                = var.s3_endpoint_url != ""
      "flink.checkpoint_interval_ms" = var.checkpoint_interval_ms
      "flink.max_parallelism"        = var.max_parallelism
      "flink.state_backend"          = var.state_backend
      "flink.python_executable"      = var.python
      "flink.jars"                   = [] # the Kafka connector is in the image's /opt/flink/lib
    },
    merge([for s in local.streams : {
      "topics.${s}.name"         = "${var.topic_prefix}.${s}"
      "topics.${s}.partitions"   = var.topics[s].partitions
      "topics.${s}.retention_ms" = var.topics[s].retention_ms
    }]...),
  )

  settings = {
    for job in keys(local.job_files) : job => merge(local.common_settings, {
      "flink.parallelism"    = var.jobs[job].parallelism
      "flink.checkpoint_dir" = "${local.storage_root}/checkpoints/${job}"
    })
  }

  # `--set key=value` per setting; values are JSON, which the jobs read as YAML.
  job_args = {
    for job, file in local.job_files : job => concat(
      ["-pyclientexec", var.python, "-py", "${var.app_dir}/${file}"],
      [for k in sort(keys(local.settings[job])) : "--set=${k}=${jsonencode(local.settings[job][k])}"],
    )
  }

  flink_configuration = {
    for job in keys(local.job_files) : job => merge({
      "taskmanager.numberOfTaskSlots" = tostring(var.jobs[job].task_slots)
      "python.client.executable"      = var.python
      "python.executable"             = var.python
      # Savepoint upgrades need a savepoint directory the operator can see. Both
      # spellings: Flink 2 reads the first, operator releases built on Flink 1.x the second.
      "execution.checkpointing.savepoint-dir"                       = "${local.storage_root}/savepoints/${job}"
      "state.savepoints.dir"                                        = "${local.storage_root}/savepoints/${job}"
      "execution.checkpointing.dir"                                 = local.settings[job]["flink.checkpoint_dir"]
      "state.checkpoints.dir"                                       = local.settings[job]["flink.checkpoint_dir"]
      "execution.checkpointing.interval"                            = "${var.checkpoint_interval_ms}ms"
      "state.backend.type"                                          = var.state_backend
      "high-availability.type"                                      = "kubernetes"
      "high-availability.storageDir"                                = "${local.storage_root}/ha/${job}"
      "kubernetes.operator.savepoint.history.max.count"             = "5"
      "kubernetes.operator.job.upgrade.last-state-fallback.enabled" = "true"
      "metrics.reporter.prom.factory.class"                         = "org.apache.flink.metrics.prometheus.PrometheusReporterFactory"
      "metrics.reporter.prom.port"                                  = tostring(var.prometheus_port)
      }, local.task_off_heap_mb[job] == 0 ? {} : {
      "taskmanager.memory.task.off-heap.size" = "${local.task_off_heap_mb[job]}m"
      }, var.s3_endpoint_url == "" ? {} : {
      # An S3-compatible store (Flink's S3 file system; AWS S3 needs neither key).
      "s3.endpoint"          = var.s3_endpoint_url
      "s3.path.style.access" = "true"
    })
  }

  env_from = var.s3_credentials_secret == null ? [] : [
    { secretRef = { name = var.s3_credentials_secret } }
  ]

  pod_template = {
    apiVersion = "v1"
    kind       = "Pod"
    metadata   = { name = "pod-template" }
    spec = {
      securityContext = { runAsNonRoot = true, runAsUser = 9999, fsGroup = 9999 }
      containers = [{
        name            = "flink-main-container"
        imagePullPolicy = var.image_pull_policy
        envFrom         = local.env_from
        ports           = [{ name = "metrics", containerPort = var.prometheus_port, protocol = "TCP" }]
        securityContext = {
          allowPrivilegeEscalation = false
          capabilities             = { drop = ["ALL"] }
        }
      }]
    }
  }

  deployments = {
    for job, file in local.job_files : job => {
      apiVersion = "flink.apache.org/v1beta1"
      kind       = "FlinkDeployment"
      metadata = {
        name      = "crawl-${job}"
        namespace = var.namespace
        labels = {
          "app.kubernetes.io/name"        = "crawl-${job}"
          "app.kubernetes.io/part-of"     = "crawler"
          "crawler/python-execution-mode" = local.python_modes[job]
        }
      }
      spec = {
        image              = var.image
        imagePullPolicy    = var.image_pull_policy
        flinkVersion       = var.flink_version
        serviceAccount     = var.service_account
        flinkConfiguration = local.flink_configuration[job]
        podTemplate        = local.pod_template
        jobManager = {
          replicas = 1
          resource = { cpu = var.jobs[job].jobmanager_cpu, memory = var.jobs[job].jobmanager_memory }
        }
        taskManager = {
          resource = { cpu = var.jobs[job].taskmanager_cpu, memory = var.jobs[job].taskmanager_memory }
        }
        job = {
          jarURI      = var.flink_python_jar
          entryClass  = "org.apache.flink.client.python.PythonDriver"
          args        = local.job_args[job]
          parallelism = var.jobs[job].parallelism
          upgradeMode = "savepoint"
          state       = "running"

          allowNonRestoredState = local.allow_non_restored_state[job]
        }
      }
    }
  }

  kafka_topics = {
    for s in local.streams : s => {
      apiVersion = "kafka.strimzi.io/v1"
      kind       = "KafkaTopic"
      metadata = {
        name      = replace("${var.topic_prefix}-${s}", ".", "-")
        namespace = var.namespace
        labels    = { "strimzi.io/cluster" = var.kafka_cluster_name }
      }
      spec = {
        topicName  = "${var.topic_prefix}.${s}"
        partitions = var.topics[s].partitions
        replicas   = var.kafka_replicas
        config = {
          "retention.ms"        = var.topics[s].retention_ms
          "min.insync.replicas" = var.kafka_replicas > 1 ? 2 : 1
        }
      }
    }
  }

  kafka_node_pool = {
    apiVersion = "kafka.strimzi.io/v1"
    kind       = "KafkaNodePool"
    metadata = {
      name      = "${var.kafka_cluster_name}-dual"
      namespace = var.namespace
      labels    = { "strimzi.io/cluster" = var.kafka_cluster_name }
    }
    spec = {
      replicas = var.kafka_replicas
      roles    = ["controller", "broker"]
      storage = {
        type = "jbod"
        volumes = [{
          id            = 0, type = "persistent-claim", size = var.kafka_storage_size,
          kraftMetadata = "shared", deleteClaim = false
        }]
      }
    }
  }

  kafka_cluster = {
    apiVersion = "kafka.strimzi.io/v1"
    kind       = "Kafka"
    metadata   = { name = var.kafka_cluster_name, namespace = var.namespace }
    spec = {
      kafka = {
        version   = var.kafka_version
        listeners = [{ name = "plain", port = 9092, type = "internal", tls = false }]
        config = {
          "offsets.topic.replication.factor"         = var.kafka_replicas
          "transaction.state.log.replication.factor" = var.kafka_replicas
          "transaction.state.log.min.isr"            = var.kafka_replicas > 1 ? 2 : 1
          "default.replication.factor"               = var.kafka_replicas
          "min.insync.replicas"                      = var.kafka_replicas > 1 ? 2 : 1
          # Exactly-once sinks hold transactions open across a checkpoint interval.
          "transaction.max.timeout.ms" = 3600000
        }
      }
      entityOperator = { topicOperator = {} }
    }
  }
}
