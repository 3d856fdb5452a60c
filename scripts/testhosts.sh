#!/usr/bin/env bash
# Test hosts on one machine: N network namespaces, each a "host" with its own network stack
# (loopback up, one veth `eth0` with 10.77.<net>.<i+1>/24) plugged into a bridge that lives in a
# namespace of its own. Nothing is routed off the machine and no address is ever added to the
# namespaces this script did not make. Open MPI launches across the hosts through an rsh agent
# that enters the host's namespace (and a UTS namespace carrying the host's name), with TCP
# between hosts over the veths and shared memory within a host. docs/cluster.md explains what this
# models and what it does not.
#
#   testhosts.sh check                     what this kernel offers (exit 77: cannot run here, with why)
#   testhosts.sh up N [--prefix P] [--slots K]
#                                          make N hosts with K slots each (default 2: ranks fill
#                                          host 0 first, K per host); prints the state directory
#   testhosts.sh down [--prefix P]         remove every namespace and link of prefix P
#   testhosts.sh run N [--prefix P] [--slots K] [--timeout S] -- CMD...
#                                          up, run CMD on host 0 (where mpirun starts), down on
#                                          any exit; CMD sees SF_HOSTFILE, SF_TESTHOSTS_DIR, the
#                                          OMPI_MCA_* settings that launch across the hosts, and
#                                          SF_LINK_DEV=eth0
#   testhosts.sh exec I [--prefix P] -- CMD...   run CMD on host I (its namespace and host name);
#                                          inside `run` it addresses that run's hosts
#   testhosts.sh agent HOST CMD...         the rsh agent Open MPI calls (plm_rsh_agent)
#
# The default prefix is "sft<pid of the shell that ran up>" for `run`, "sft" for up/down; the
# subnet is derived from the prefix, so concurrent `run`s do not collide. Needs root, iproute2
# (ip netns, veth, bridge) and, for link faults, tc with the tbf qdisc.
set -euo pipefail

state_root=${SF_TESTHOSTS_STATE:-/run/sf-testhosts}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
self="$here/$(basename "${BASH_SOURCE[0]}")"

die() { echo "testhosts: $*" >&2; exit 2; }
skip() { echo "testhosts: cannot run here: $*" >&2; exit 77; }

net_of() {  # a /24 in 10.77.0.0/16 derived from the prefix
  local sum
  sum=$(printf '%s' "$1" | cksum | cut -d' ' -f1)
  echo $((sum % 250 + 1))
}

cmd_check() {
  [ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces)"
  command -v ip >/dev/null || skip "no ip (iproute2)"
  command -v unshare >/dev/null || skip "no unshare (util-linux)"
  local probe="sftprobe$$"
  ip netns add "$probe" 2>/dev/null || skip "ip netns add failed (no network namespaces in this kernel or container)"
  local ok=1 why=""
  ip -n "$probe" link add v0 type veth peer name v1 2>/dev/null || { ok=0; why="no veth"; }
  [ $ok = 1 ] && { ip -n "$probe" link add b0 type bridge 2>/dev/null || { ok=0; why="no bridge"; }; }
  local tbf=no netem=no
  if [ $ok = 1 ] && command -v tc >/dev/null; then
    ip -n "$probe" link set v0 up 2>/dev/null || true
    ip netns exec "$probe" tc qdisc add dev v0 root tbf rate 100mbit burst 32kbit latency 50ms 2>/dev/null && tbf=yes
    ip netns exec "$probe" tc qdisc del dev v0 root 2>/dev/null || true
    ip netns exec "$probe" tc qdisc add dev v0 root netem delay 1ms 2>/dev/null && netem=yes
  fi
  unshare --uts true 2>/dev/null || { ok=0; why="${why:+$why, }no UTS namespaces"; }
  ip netns del "$probe"
  [ $ok = 1 ] || skip "$why"
  echo "namespaces yes, veth yes, bridge yes, UTS yes, tc tbf $tbf, tc netem $netem"
}

cmd_up() {
  local n=$1 prefix=$2 slots=$3
  [[ "$slots" =~ ^[0-9]+$ ]] && [ "$slots" -ge 1 ] || die "up: --slots must be a positive integer, got '$slots'"
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 64 ] || die "up: N must be 1..64, got '$n'"
  [ "${#prefix}" -le 8 ] || die "prefix '$prefix' longer than 8 characters (interface names are short)"
  cmd_check >/dev/null
  local dir="$state_root/$prefix"
  if [ -e "$dir" ]; then
    # State whose namespaces are all gone (a run killed with SIGKILL, a machine whose /run
    # survived): nothing is running there, so it is removed, and said. Live hosts are refused.
    if ip netns list 2>/dev/null | awk '{print $1}' | grep -qE "^${prefix}(h[0-9]+|br)$"; then
      die "hosts with prefix $prefix are up already ($dir); 'testhosts.sh down --prefix $prefix' first"
    fi
    echo "testhosts: removing stale state $dir (its namespaces are gone)" >&2
    rm -rf "$dir"
  fi
  trap 'cmd_down "'"$prefix"'" >/dev/null 2>&1' ERR
  mkdir -p "$dir"
  local net
  net=$(net_of "$prefix")
  ip netns add "${prefix}br"
  ip -n "${prefix}br" link set lo up
  ip -n "${prefix}br" link add br0 type bridge
  ip -n "${prefix}br" link set br0 up
  : >"$dir/hostfile"
  : >"$dir/hosts"
  for ((i = 0; i < n; i++)); do
    local ns="${prefix}h$i" addr="10.77.$net.$((i + 1))" host="${prefix}-host$i"
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    # One end becomes eth0 in the host, the other a bridge port in the bridge's namespace.
    ip link add "${prefix}v$i" type veth peer name eth0 netns "$ns"
    ip link set "${prefix}v$i" netns "${prefix}br"
    ip -n "${prefix}br" link set "${prefix}v$i" master br0
    ip -n "${prefix}br" link set "${prefix}v$i" up
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set eth0 up
    echo "$addr slots=$slots" >>"$dir/hostfile"
    echo "$i $addr $ns $host" >>"$dir/hosts"
  done
  cat >"$dir/env" <<EOF
export SF_TESTHOSTS_DIR=$dir
export SF_HOSTFILE=$dir/hostfile
export SF_LINK_DEV=eth0
export OMPI_MCA_plm_rsh_agent="$self agent"
export OMPI_MCA_orte_default_hostfile=$dir/hostfile
export OMPI_MCA_btl=tcp,self,vader
export OMPI_MCA_pml=ob1
export OMPI_MCA_btl_tcp_if_include=10.77.$net.0/24
export OMPI_MCA_oob_tcp_if_include=10.77.$net.0/24
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
EOF
  trap - ERR
  echo "$dir"
}

cmd_down() {
  local prefix=$1
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${prefix}(h[0-9]+|br)$" || true); do
    # Processes left in a host's namespace (a killed run) go with it.
    for pid in $(ip netns pids "$ns" 2>/dev/null || true); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -rf "${state_root:?}/$prefix"
  echo "down: prefix $prefix removed"
}

host_line() {  # host_line DIR KEY → "i addr ns host" for an index, address or host name
  awk -v k="$2" '$1 == k || $2 == k || $4 == k' "$1/hosts" | head -1
}

# Runs CMD in host i's network namespace and in a UTS namespace named after the host, with
# SF_HOSTNAME set too (what the ranks report as their hostname).
in_host() {
  local dir=$1 key=$2
  shift 2
  local line
  line=$(host_line "$dir" "$key")
  [ -n "$line" ] || die "no test host '$key' in $dir/hosts"
  set -- "$line" "$@"
  local i addr ns host
  read -r i addr ns host <<<"$1"
  shift
  exec ip netns exec "$ns" env SF_HOSTNAME="$host" unshare --uts -- /bin/sh -c 'hostname "$0" && exec "$@"' "$host" "$@"
}

cmd_agent() {
  # Open MPI calls: AGENT [-x] HOST COMMAND-STRING...; the host is an address of the hostfile.
  [ "${1:-}" = "-x" ] && shift
  local host=$1
  shift
  local dir
  dir=$(grep -l -E "^[0-9]+ $host " "$state_root"/*/hosts 2>/dev/null | head -1 | xargs -r dirname)
  [ -n "$dir" ] || die "agent: $host is not a test host"
  in_host "$dir" "$host" /bin/sh -c "$*"
}

cmd_run() {
  local n=$1 prefix=$2 timeout_s=$3 slots=$4
  shift 4
  [ $# -gt 0 ] || die "run: no command after --"
  cmd_check >/dev/null
  local dir
  trap 'cmd_down "'"$prefix"'" >/dev/null 2>&1' EXIT
  trap 'exit 143' INT TERM  # while the hosts come up: exit, and the EXIT trap takes them down
  dir=$(cmd_up "$n" "$prefix" "$slots")
  # shellcheck disable=SC1091
  . "$dir/env"
  local rc=0
  # In the background and waited for: bash runs a trap only once its foreground command ends, but
  # `wait` returns at once on a signal, so INT/TERM stop the command and tear the hosts down now.
  timeout --kill-after=10 "$timeout_s" "$self" exec 0 --prefix "$prefix" -- "$@" &
  local child=$!
  trap 'kill -TERM '"$child"' 2>/dev/null; exit 143' INT TERM
  wait "$child" || rc=$?
  trap - INT TERM
  [ $rc -eq 124 ] && echo "testhosts: run: '$*' exceeded ${timeout_s}s and was stopped" >&2
  return $rc
}

sub=${1:-}
[ -n "$sub" ] || die "usage: testhosts.sh check|up|down|run|exec|agent ... (see the header of $self)"
shift
prefix="" timeout_s=300 slots=2
case $sub in
  check) cmd_check ;;
  agent) cmd_agent "$@" ;;
  up | down | run | exec)
    pos=()
    while [ $# -gt 0 ]; do
      case $1 in
        --prefix) prefix=$2; shift 2 ;;
        --timeout) timeout_s=$2; shift 2 ;;
        --slots) slots=$2; shift 2 ;;
        --) shift; break ;;
        *) pos+=("$1"); shift ;;
      esac
    done
    case $sub in
      up) cmd_up "${pos[0]:-}" "${prefix:-sft}" "$slots" ;;
      down) cmd_down "${prefix:-sft}" ;;
      run) cmd_run "${pos[0]:-}" "${prefix:-sft$(($$ % 100000))}" "$timeout_s" "$slots" "$@" ;;
      exec)
        # Inside `run`, the hosts of that run (SF_TESTHOSTS_DIR) unless --prefix says otherwise.
        if [ -z "$prefix" ] && [ -n "${SF_TESTHOSTS_DIR:-}" ]; then dir=$SF_TESTHOSTS_DIR; else dir="$state_root/${prefix:-sft}"; fi
        [ -d "$dir" ] || die "exec: no hosts with prefix ${prefix:-sft} are up"
        in_host "$dir" "${pos[0]:-}" "$@"
        ;;
    esac
    ;;
  *) die "unknown subcommand '$sub' (check|up|down|run|exec|agent)" ;;
esac
