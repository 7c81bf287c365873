# The det GPU agent image, for AWS (amazon-ebs) and GCP (googlecompute) from one template.
#
# Both builds start from the clouds' maintained GPU images that `det deploy` also boots by
# default, which already carry the NVIDIA driver, Docker and the NVIDIA container toolkit:
#   AWS: the Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 24.04), read from its public
#        SSM parameter (deploy/aws/config.py DLAMI_SSM_PARAMETER);
#   GCP: the Deep Learning VM image family of deploy/gcp/config.py GPU_IMAGE.
# On top they add det's agent, installed from det's own wheel (sha256-checked, never `det` by
# name from a package index), its systemd unit, the bootstrap script and the pre-pulled default
# task image, so a new agent registers without pulling ~10 GB first.
#
#   python -m build --wheel        # dist/det_platform-<version>-py3-none-any.whl
#   packer init agent_ami
#   packer build -only=amazon-ebs.det-agent \
#     -var det_wheel=dist/det_platform-0.1.0-py3-none-any.whl \
#     -var det_wheel_sha256=$(sha256sum dist/det_platform-0.1.0-py3-none-any.whl | cut -d' ' -f1) \
#     agent_ami/det-agent.pkr.hcl
#   packer build -only=googlecompute.det-agent -var gcp_project_id=my-project ... (same -var)
#
# Pools then use the AMI id as `image_id` (AWS) or the image / family
# `projects/<project>/global/images/family/det-agent` as `boot_disk_source_image` (GCP). The
# image boots idle: the user data / startup script the master renders (bootstrap.sh) writes
# /etc/det/agent.yaml and starts det-agent.

packer {
  required_plugins {
    amazon = {
      version = ">= 1.3.0"
      source  = "github.com/hashicorp/amazon"
    }
    googlecompute = {
      version = ">= 1.1.0"
      source  = "github.com/hashicorp/googlecompute"
    }
  }
}

# --- what goes into the image (both clouds) ---

variable "det_wheel" {
  type        = string
  description = "Local path of det's wheel (python -m build --wheel); uploaded to the build VM."
}

variable "det_wheel_sha256" {
  type        = string
  description = "sha256 of det_wheel, checked on the build VM before pip installs it."
  validation {
    condition     = can(regex("^[0-9a-f]{64}$", var.det_wheel_sha256))
    error_message = "The det_wheel_sha256 value must be 64 lowercase hex digits (sha256sum of the wheel)."
  }
}

variable "det_version" {
  type    = string
  default = "0.1.0"
}

variable "det_package_index" {
  type        = string
  default     = ""
  description = "Index pip takes det's dependencies from (empty: pip's default). det itself always comes from det_wheel."
}

variable "default_task_image" {
  type        = string
  default     = "determinedai/pytorch-ngc:0.38.1"
  description = "The task image det deploy sets by default (deploy/common/masteryaml.py); pre-pulled."
}

variable "extra_task_images" {
  type        = list(string)
  default     = []
  description = "More task images to pre-pull."
}

# --- AWS ---

variable "aws_region" {
  type    = string
  default = "us-west-2"
}

variable "aws_instance_type" {
  type        = string
  default     = "g4dn.xlarge"
  description = "A GPU type, so the driver and the container toolkit are checked before saving."
}

variable "aws_root_volume_size" {
  type    = number
  default = 150
}

variable "ami_regions" {
  type        = list(string)
  default     = []
  description = "Other regions to copy the AMI to."
}

# --- GCP ---

variable "gcp_project_id" {
  type        = string
  default     = ""
  description = "The project the GCP build runs in and stores the image in (needed for googlecompute)."
}

variable "gcp_zone" {
  type        = string
  default     = "us-west1-b"
  description = "A zone that offers gcp_accelerator_type."
}

variable "gcp_machine_type" {
  type    = string
  default = "n1-standard-4"
}

variable "gcp_accelerator_type" {
  type    = string
  default = "nvidia-tesla-t4"
}

variable "gcp_disk_size" {
  type    = number
  default = 150
}

variable "gcp_image_family" {
  type    = string
  default = "det-agent"
}

variable "gcp_network" {
  type    = string
  default = "default"
}

variable "gcp_subnetwork" {
  type    = string
  default = ""
}

# The AWS Deep Learning Base GPU AMI of the region, from its public SSM parameter.
data "amazon-parameterstore" "dlami" {
  name   = "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-24.04/latest/ami-id"
  region = var.aws_region
}

locals {
  timestamp = regex_replace(timestamp(), "[- TZ:]", "")
  # GCE image names and label values: lowercase letters, digits and dashes.
  version_key = replace(var.det_version, ".", "-")
  wheel_name  = basename(var.det_wheel)
  task_images = join(" ", concat([var.default_task_image], var.extra_task_images))
}

source "amazon-ebs" "det-agent" {
  region        = var.aws_region
  source_ami    = data.amazon-parameterstore.dlami.value
  instance_type = var.aws_instance_type
  ami_name      = "det-agent-${var.det_version}-${local.timestamp}"
  ami_regions   = var.ami_regions
  ssh_username  = "ubuntu"
  imds_support  = "v2.0"

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 2
  }

  launch_block_device_mappings {
    device_name           = "/dev/sda1"
    volume_size           = var.aws_root_volume_size
    volume_type           = "gp3"
    delete_on_termination = true
  }

  tags = {
    Name          = "det-agent-${var.det_version}"
    "managed-by"  = "det"
    "det-version" = var.det_version
    "base-image"  = "{{ .SourceAMIName }}"
  }
}

source "googlecompute" "det-agent" {
  project_id              = var.gcp_project_id
  zone                    = var.gcp_zone
  machine_type            = var.gcp_machine_type
  source_image_family     = "common-cu129-ubuntu-2404-nvidia-580"
  source_image_project_id = ["deeplearning-platform-release"]
  image_name              = "det-agent-${local.version_key}-${local.timestamp}"
  image_family            = var.gcp_image_family
  image_description       = "det agent ${var.det_version} on the Deep Learning VM base image"
  disk_size               = var.gcp_disk_size
  disk_type               = "pd-ssd"
  network                 = var.gcp_network
  subnetwork              = var.gcp_subnetwork
  ssh_username            = "packer"

  # GPUs cannot live-migrate: the build VM must stop on host maintenance.
  accelerator_type    = "projects/${var.gcp_project_id}/zones/${var.gcp_zone}/acceleratorTypes/${var.gcp_accelerator_type}"
  accelerator_count   = 1
  on_host_maintenance = "TERMINATE"

  image_labels = {
    "managed-by"  = "det"
    "det-version" = local.version_key
  }
}

build {
  sources = [
    "source.amazon-ebs.det-agent",
    "source.googlecompute.det-agent",
  ]

  provisioner "file" {
    source      = var.det_wheel
    destination = "/tmp/${local.wheel_name}"
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
      "DET_WHEEL=/tmp/${local.wheel_name}",
      "DET_WHEEL_SHA256=${var.det_wheel_sha256}",
      "DET_PACKAGE_INDEX=${var.det_package_index}",
      "DET_TASK_IMAGES=${local.task_images}",
    ]
    script = "${path.root}/install-agent.sh"
  }

  # The base image's GPU stack and the agent, checked before the image is saved.
  provisioner "shell" {
    inline = [
      "nvidia-smi",
      "det-agent --help > /dev/null",
      "sudo docker run --rm --gpus all ${var.default_task_image} nvidia-smi -L",
    ]
  }

  post-processor "manifest" {
    output = "packer-manifest-${source.type}.json"
  }
}
