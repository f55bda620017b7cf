# Provider-free on purpose: it only renders manifests and the crawl configuration,
# so CI can `init`, `validate` and `apply` it offline and check what it produces.
terraform {
  required_version = ">= 1.6"
}
