# Sourced by tools/test.sh, tools/sanitize.sh and tools/fuzz.sh: where ccache keeps its objects and
# how it keys them. The cache lives outside the clone (it survives a fresh clone on the same
# machine); CCACHE_BASEDIR makes paths inside the checkout relative in the key, so a clone at another
# path hits the same entries. 8 GB holds the plain, sanitizer and fuzz builds together.
export CCACHE_DIR="${CCACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gemtb-ccache}"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(pwd)}"
export CCACHE_NOHASHDIR=1
export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-8G}"
