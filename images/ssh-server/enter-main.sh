#!/bin/sh
# sshd's ForceCommand: run this login inside the Instance's `main` container.
#
# main is the lowest-numbered process of the Pod (shared process namespace) that lives in another
# mount namespace than this sidecar and sees the workspace at VOLUME_MOUNT_PATH (the pause process
# does not).  The session enters main's mount, UTS, IPC, network, PID and cgroup namespaces and
# runs with main's environment: the requested command, an sftp server from main's image, or a login
# shell.  No main, no session: it never falls back to the sidecar's own filesystem.
set -eu

VOLUME_MOUNT_PATH=${VOLUME_MOUNT_PATH:-/workspace}
# shellcheck disable=SC1090
[ -r "${ENTER_MAIN_ENV:-/run/enter-main.env}" ] && . "${ENTER_MAIN_ENV:-/run/enter-main.env}"

own_mnt=$(readlink /proc/self/ns/mnt)
target=""
for pid in $(ls /proc | grep -E '^[0-9]+$' | sort -n); do
	mnt=$(readlink "/proc/$pid/ns/mnt" 2>/dev/null) || continue
	[ "$mnt" = "$own_mnt" ] && continue
	[ -d "/proc/$pid/root$VOLUME_MOUNT_PATH" ] || continue
	target=$pid
	break
done
if [ -z "$target" ]; then
	echo "enter-main: the main container is not running (no process sees $VOLUME_MOUNT_PATH); try again once the Instance is Ready" >&2
	exit 1
fi

command=${SSH_ORIGINAL_COMMAND:-}
case "$command" in
"")
	script='cd "$VOLUME_MOUNT_PATH" 2>/dev/null || cd /; if command -v bash >/dev/null 2>&1; then exec bash -l; else exec sh -l; fi'
	;;
sftp | internal-sftp | */sftp-server)
	script='for s in /usr/lib/openssh/sftp-server /usr/lib/ssh/sftp-server /usr/libexec/openssh/sftp-server /usr/libexec/sftp-server; do [ -x "$s" ] && exec "$s"; done; echo "enter-main: main has no sftp-server; install openssh-sftp-server in its image (or use scp -O)" >&2; exit 1'
	;;
*)
	script='cd "$VOLUME_MOUNT_PATH" 2>/dev/null || cd /; exec sh -c "$SSH_ORIGINAL_COMMAND"'
	;;
esac

# main's environment (NUL-separated) becomes the session's, plus what the SSH session itself sets.
ENTER_MAIN_SCRIPT=$script
export ENTER_MAIN_SCRIPT VOLUME_MOUNT_PATH
exec xargs -0 -x -a "/proc/$target/environ" sh -c '
	target=$1; shift
	exec nsenter --target "$target" --mount --uts --ipc --net --pid --cgroup -- \
		env -i "$@" HOME=/root TERM="${TERM:-xterm}" LANG="${LANG:-C.UTF-8}" \
		VOLUME_MOUNT_PATH="$VOLUME_MOUNT_PATH" SSH_ORIGINAL_COMMAND="${SSH_ORIGINAL_COMMAND:-}" \
		SSH_CONNECTION="${SSH_CONNECTION:-}" SSH_TTY="${SSH_TTY:-}" \
		sh -c "$ENTER_MAIN_SCRIPT"
' enter-main "$target"
