# The det agent image for AWS (amazon-ebs): Ubuntu 22.04, Docker, the NVIDIA driver and
# container toolkit, the det agent from a wheel, its systemd unit and the bootstrap script.
#
#   python -m build --wheel            # dist/det-<version>-py3-none-any.whl
#   packer init agent_ami && packer build -var det_wheel=dist/det-0.1.0-py3-none-any.whl \
#     -var region=us-west-2 agent_ami/aws.pkr.hcl
#
# A pool then uses the AMI id as `image_id`. The image boots idle: the user data the master
# renders (bootstrap.sh) writes /etc/det/agent.yaml and starts det-agent.

packer {
  required_plugins {
    amazon = {
      version = ">= 1.3.0"
      source  = "github.com/hashicorp/amazon"
    }
  }
}

variable "region" {
  type    = string
  default = "us-west-2"
}

variable "build_instance_type" {
  type        = string
  default     = "g4dn.xlarge"
  description = "A GPU type, so the driver install can be checked with nvidia-smi."
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

variable "root_volume_size" {
  type    = number
  default = 100
}

variable "ami_regions" {
  type        = list(string)
  default     = []
  description = "Other regions to copy the AMI to."
}

locals {
  timestamp = regex_replace(timestamp(), "[- TZ:]", "")
}

source "amazon-ebs" "det-agent" {
  region        = var.region
  instance_type = var.build_instance_type
  ami_name      = "det-agent-${var.det_version}-${local.timestamp}"
  ami_regions   = var.ami_regions
  ssh_username  = "ubuntu"
  imds_support  = "v2.0"

  source_ami_filter {
    filters = {
      name                = "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-*"
      root-device-type    = "ebs"
      virtualization-type = "hvm"
    }
    owners      = ["099720109477"] # Canonical
    most_recent = true
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 2
  }

  launch_block_device_mappings {
    device_name           = "/dev/sda1"
    volume_size           = var.root_volume_size
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

build {
  name    = "det-agent"
  sources = ["source.amazon-ebs.det-agent"]

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
    ]
  }

  post-processor "manifest" {
    output = "packer-manifest.json"
  }
}
