#!/usr/bin/env bash
# SimGrid's Python bindings for this checkout's virtualenv (docs/simgrid.md#install).
#   scripts/simgrid/install.sh VENV
# Already importable from VENV: nothing to do. Otherwise, on Debian/Ubuntu as root: apt-get installs
# python3-simgrid (SimGrid 3.32 on Debian 12) and its one extension module is linked into VENV's
# site-packages (only that file: Debian's other packages would shadow the virtualenv's). Elsewhere: says what
# to run and exits 1 (conda users: environment.yml).
set -euo pipefail
venv=${1:?usage: scripts/simgrid/install.sh VENV}
py="$venv/bin/python"
if "$py" -c "import simgrid" >/dev/null 2>&1; then
    echo "simgrid: importable from $venv"; exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "simgrid: not installed; as root on Debian/Ubuntu run 'make simgrid', or use conda (environment.yml); docs/simgrid.md#install"
    exit 1
fi
if ! dpkg -s python3-simgrid >/dev/null 2>&1; then
    echo "simgrid: apt-get install python3-simgrid (~30 s)"
    apt-get install -y -qq python3-simgrid >/dev/null 2>&1 \
        || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq python3-simgrid >/dev/null; }
fi
so=$(dpkg -L python3-simgrid | grep -E '/simgrid\.cpython-[0-9]+[^/]*\.so$' | head -n 1)
want=$("$py" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
case "$so" in
    *"$want") ;;
    *) echo "simgrid: Debian's module $(basename "$so") is not for this virtualenv's Python ($want); use conda (environment.yml)"; exit 1 ;;
esac
site=$("$py" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
ln -sf "$so" "$site/"
"$py" -c "import simgrid" >/dev/null 2>&1 && echo "simgrid: linked $(basename "$so") into $venv"
