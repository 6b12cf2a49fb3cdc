#!/usr/bin/env bash
# Makes sure a Docker daemon answers, for the container path of the tests (issue 17 item 4). When none does, starts
# one in the background that keeps every container on this machine's loopback: no bridge network and no iptables
# rules (containers run with host networking only; nothing outside 127.0.0.0/8 is ever contacted). Waits until it
# answers (at most a minute). Its log: ${PLITZI_CACHE:-$HOME/.cache/plitzi_jobs_mysql}/dockerd.log.
set -euo pipefail

if docker info --format '{{.ServerVersion}}' >/dev/null 2>&1; then exit 0; fi
command -v dockerd >/dev/null 2>&1 || { echo "dockerd.sh: dockerd is missing (Debian: apt-get install docker.io)" >&2; exit 2; }
cache="${PLITZI_CACHE:-$HOME/.cache/plitzi_jobs_mysql}"
mkdir -p "$cache"
# setsid: the daemon outlives this script and the shell that ran it, as a system service would.
setsid dockerd --bridge=none --iptables=false --ip6tables=false >"$cache/dockerd.log" 2>&1 </dev/null &
echo $! >"$cache/dockerd.pid"  # for whoever started it to stop it (.ci/run does)
for _ in $(seq 1 300); do
  if docker info --format '{{.ServerVersion}}' >/dev/null 2>&1; then
    echo "dockerd.sh: started dockerd (pid $!), log in $cache/dockerd.log" >&2; exit 0
  fi
  kill -0 $! 2>/dev/null || break
  sleep 0.2
done
echo "dockerd.sh: dockerd did not answer; the end of $cache/dockerd.log:" >&2
tail -n 20 "$cache/dockerd.log" >&2
exit 1
