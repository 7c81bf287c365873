# The det agent image for GCP (googlecompute): Ubuntu 22.04, Docker, the NVIDIA driver and
# container toolkit, the det agent from a wheel, its systemd unit and the bootstrap script.
# The same steps as aws.pkr.hcl, built on a GPU VM so the driver is checked before saving.
#
#   python -m build --wheel            # dist/det-<version>-py3-none-any.whl
#   packer init agent_ami && packer build -var project_id=my-project \
#     -var det_wheel=dist/det-0.1.0-py3-none-any.whl agent_ami/gcp.pkr.hcl
#
# A pool then uses `projects/<project>/global/images/<name>` (or the family
# `projects/<project>/global/images/family/det-agent`) as `boot_disk_source_image`. The image
# boots idle: the startup-script metadata item the master sets (bootstrap.sh) reads the
# instance name from the metadata server, writes /etc/det/agent.yaml and starts det-agent.

packer {
  required_plugins {
    googlecompute = {
      version = ">= 1.1.0"
      source  = "github.com/hashicorp/googlecompute"
    }
  }
}

variable "project_id" {
  type = string
}

variable "zone" {
  type        = string
  default     = "us-west1-b"
  description = "A zone that offers build_accelerator_type."
}

variable "build_machine_type" {
  type    = string
  default = "n1-standard-4"
}

variable "build_accelerator_type" {
  type        = string
  default     = "nvidia-tesla-t4"
  description = "A GPU for the build VM, so the driver install can be checked with nvidia-smi."
}

variable "det_wheel" {
  type        = string
  description = "Path to the det wheel (pip installs it with the [agent] extra)."
}

variable "det_version" {
  type    = string
  default = "0.1.0"
}

variable "nvidia_driver" {
  type    = string
  default = "535-server"
}

variable "disk_size" {
  type    = number
  default = 100
}

variable "image_family" {
  type    = string
  default = "det-agent"
}

variable "network" {
  type    = string
  default = "default"
}

variable "subnetwork" {
  type    = string
  default = ""
}

locals {
  timestamp = regex_replace(timestamp(), "[- TZ:]", "")
  # GCE image names and label values: lowercase letters, digits and dashes.
  version_key = replace(var.det_version, ".", "-")
}

source "googlecompute" "det-agent" {
  project_id              = var.project_id
  zone                    = var.zone
  machine_type            = var.build_machine_type
  source_image_family     = "ubuntu-2204-lts"
  source_image_project_id = ["ubuntu-os-cloud"]
  image_name              = "det-agent-${local.version_key}-${local.timestamp}"
  image_family            = var.image_family
  image_description       = "det agent ${var.det_version}: Docker, NVIDIA driver + container toolkit"
  disk_size               = var.disk_size
  disk_type               = "pd-ssd"
  network                 = var.network
  subnetwork              = var.subnetwork
  ssh_username            = "packer"

  # GPUs cannot live-migrate: the build VM must stop on host maintenance.
  accelerator_type    = "projects/${var.project_id}/zones/${var.zone}/acceleratorTypes/${var.build_accelerator_type}"
  accelerator_count   = 1
  on_host_maintenance = "TERMINATE"

  image_labels = {
    "managed-by"  = "det"
    "det-version" = local.version_key
  }
}

build {
  name    = "det-agent"
  sources = ["source.googlecompute.det-agent"]

  provisioner "file" {
    source      = var.det_wheel
    destination = "/tmp/"
  }

  provisioner "file" {
    source      = "${path.root}/bootstrap.sh"
    destination = "/tmp/det-bootstrap.sh"
  }

  provisioner "file" {
    source      = "${path.root}/det-agent.service"
    destination = "/tmp/det-agent.service"
  }

  provisioner "shell" {
    execute_command = "sudo -E bash -eux '{{ .Path }}'"
    environment_vars = [
      "DEBIAN_FRONTEND=noninteractive",
      "NVIDIA_DRIVER=${var.nvidia_driver}",
    ]
    script = "${path.root}/install-agent.sh"
  }

  # The driver loads after a reboot; check it and the agent before the image is saved.
  provisioner "shell" {
    expect_disconnect = true
    inline            = ["sudo reboot"]
  }

  provisioner "shell" {
    pause_before = "30s"
    inline = [
      "nvidia-smi",
      "det-agent --help > /dev/null",
      "docker info > /dev/null 2>&1 || sudo docker info > /dev/null",
      # The metadata server answers the name the bootstrap uses as the agent id.
      "curl -fsS -H 'Metadata-Flavor: Google' http://metadata.google.internal/computeMetadata/v1/instance/name",
    ]
  }

  post-processor "manifest" {
    output = "packer-manifest-gcp.json"
  }
}
