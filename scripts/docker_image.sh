#!/usr/bin/env bash
# The local MySQL 9.7 image for the container path of the tests: `docker import` of the root scripts/mysql_root.sh
# builds, with scripts/mysql_entrypoint.sh as its entrypoint (the official image's MYSQL_* variables). No registry
# is asked for anything. Tagged by what it is made of, so a changed entrypoint or root makes a new image and a
# second run only prints the tag.   scripts/docker_image.sh   -> prints e.g. plitzi-mysql:9.7-1a2b3c4d5e
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(bash "$here/mysql_root.sh")"
digest="$(cat "$root/.plitzi-ready" "$here/mysql_entrypoint.sh" "$0" | sha256sum | cut -c1-10)"
tag="plitzi-mysql:9.7-$digest"
if docker image inspect "$tag" >/dev/null 2>&1; then echo "$tag"; exit 0; fi

staging="$(mktemp -d)"
trap 'rm -rf "$staging"' EXIT
install -D -m 0755 "$here/mysql_entrypoint.sh" "$staging/usr/local/bin/docker-entrypoint.sh"
echo "docker_image.sh: importing $root as $tag (about a minute)" >&2
# The root, less what a container does not need (apt lists, docs, the servers' scratch directories under /tmp)
# and the data directory the package's installation made (root by auth_socket: the entrypoint makes its own),
# plus the entrypoint.
tar -C "$root" --exclude=./tmp/* --exclude=./var/lib/apt/lists/* --exclude=./usr/share/doc/* \
    --exclude=./usr/share/man/* --exclude=./var/lib/mysql/* --exclude=./.plitzi-ready -cf - . -C "$staging" ./usr/local/bin/docker-entrypoint.sh |
  docker import \
    --change 'ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]' \
    --change 'CMD ["mysqld"]' \
    --change 'EXPOSE 3306' \
    --change 'ENV LANG=C.UTF-8' \
    - "$tag" >/dev/null
echo "$tag"
