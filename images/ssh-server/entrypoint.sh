#!/bin/sh
# Start sshd in the foreground, with fresh host keys and the workspace path enter-main looks for.
set -eu

# sshd's privilege-separation directory, made at start: mmdebstrap empties /run of the base layer
# images/build.py packs (the build hook's mkdir does not survive), and sshd refuses to start without it.
mkdir -p -m 0755 /run/sshd
ssh-keygen -A >/dev/null
# sshd does not pass the container's environment to sessions: hand enter-main what it needs.
printf 'VOLUME_MOUNT_PATH=%s\n' "${VOLUME_MOUNT_PATH:-/workspace}" >/run/enter-main.env
exec /usr/sbin/sshd -D -e -f /etc/ssh/sshd_config
