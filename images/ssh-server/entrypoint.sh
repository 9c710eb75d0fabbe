#!/bin/sh
# Start sshd in the foreground, with fresh host keys and the workspace path enter-main looks for.
set -eu

ssh-keygen -A >/dev/null
# sshd does not pass the container's environment to sessions: hand enter-main what it needs.
printf 'VOLUME_MOUNT_PATH=%s\n' "${VOLUME_MOUNT_PATH:-/workspace}" >/run/enter-main.env
exec /usr/sbin/sshd -D -e -f /etc/ssh/sshd_config
