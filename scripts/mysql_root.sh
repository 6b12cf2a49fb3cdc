#!/usr/bin/env bash
# A minimal Debian root holding Oracle MySQL 9.7 LTS (Debian sid's mysql-server), for the test suites' throwaway
# MySQL servers and the local Docker image (issue 17). Built once with debootstrap (about 2 minutes, 1.4 GB) and
# kept in the cache directory: a second run only prints its path. Needs root and debootstrap.
#   scripts/mysql_root.sh            build if missing, print the root's path
#   scripts/mysql_root.sh --rebuild  throw the cached root away first
set -euo pipefail

cache="${PLITZI_CACHE:-$HOME/.cache/plitzi_jobs_mysql}"
root="${PLITZI_MYSQL_ROOT:-$cache/mysql-9.7-root}"
suite="${PLITZI_MYSQL_SUITE:-sid}"

if [ "${1:-}" = "--rebuild" ]; then rm -rf "$root"; fi
# A finished root carries this marker; anything else at the path is a build that died half-way.
if [ -e "$root/.plitzi-ready" ]; then echo "$root"; exit 0; fi

command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || {
  echo "mysql_root.sh: debootstrap is missing (Debian: apt-get install debootstrap)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "mysql_root.sh: debootstrap and chroot need root" >&2; exit 2; }

mkdir -p "$cache"
# One builder at a time: a second caller waits for the first and then finds the marker.
exec 9>"$cache/.mysql-root.lock"
flock 9
if [ -e "$root/.plitzi-ready" ]; then echo "$root"; exit 0; fi

work="$root.building"
rm -rf "$work"
echo "mysql_root.sh: building the MySQL 9.7 root in $root (debootstrap $suite, about 2 minutes)" >&2
PATH="$PATH:/usr/sbin:/sbin" debootstrap --variant=minbase "$suite" "$work" http://deb.debian.org/debian >"$cache/debootstrap.log" 2>&1 || {
  echo "mysql_root.sh: debootstrap failed; the last lines of $cache/debootstrap.log:" >&2
  tail -n 20 "$cache/debootstrap.log" >&2; exit 1; }
# The suite's Release file can be older than this machine's clock; the packages are still signed.
apt_opts=(-o Acquire::Check-Valid-Until=false -o APT::Install-Recommends=false -o Dpkg::Use-Pty=0)
chroot "$work" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
  apt-get "${apt_opts[@]}" -qq update >>"$cache/debootstrap.log" 2>&1
# policy-rc.d: no service is started inside the root while the packages install.
printf '#!/bin/sh\nexit 101\n' >"$work/usr/sbin/policy-rc.d"; chmod +x "$work/usr/sbin/policy-rc.d"
chroot "$work" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
  apt-get "${apt_opts[@]}" -qq install -y mysql-server mysql-client tzdata >>"$cache/debootstrap.log" 2>&1 || {
  echo "mysql_root.sh: installing mysql-server in the root failed; see $cache/debootstrap.log" >&2
  tail -n 20 "$cache/debootstrap.log" >&2; exit 1; }
chroot "$work" apt-get clean
chroot "$work" mysqld --version >"$work/.plitzi-ready"
mv "$work" "$root"
echo "$root"
