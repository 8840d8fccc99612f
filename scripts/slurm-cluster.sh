#!/usr/bin/env bash
# A real single-node Slurm cluster (Debian's slurm-wlm + munge) for end-to-end tests and
# development, on a machine without systemd. Everything of the cluster lives under one
# directory D (config, state, logs, pid files, fake GPU devices); munged is machine-wide.
#
# Usage:
#   scripts/slurm-cluster.sh install
#       Installs slurm-wlm and munge with apt-get if slurmctld, slurmd, sbatch or munged is
#       missing (idempotent). Not root: tries `sudo -n`, else says what to run and exits 2.
#   scripts/slurm-cluster.sh start D [--gpus N] [--cpus N] [--memory-mb N] [--timeout S] [--clean]
#       Writes D/etc/slurm.conf, D/etc/gres.conf and D/env.sh, makes N fake GPUs D/dev/gpu*,
#       starts munged (or reuses a working one), slurmctld and slurmd, and waits until the
#       node is idle. Defaults: --gpus 2, --cpus $(nproc), --memory-mb 80% of MemTotal,
#       --timeout 60 (seconds to wait for the node). More CPUs or memory than the machine has
#       adds SlurmdParameters=config_overrides (else the node would be INVAL). --clean wipes
#       D/state first (jobs and node state of an earlier run, e.g. a node stuck in INVAL).
#       Already running from D: says so and exits 0. Prints the SLURM_CONF path as the only
#       line on stdout (progress goes to stderr), so
#       `export SLURM_CONF=$(scripts/slurm-cluster.sh start D)` works; or `source D/env.sh`.
#       Must run as root. Exits 1 when the node does not come up (INVAL/DRAIN is named, the
#       daemons' logs are shown, the daemons stopped), 2 when Slurm is not installed or not root.
#   scripts/slurm-cluster.sh stop D [--munge]
#       Cancels the cluster's jobs, stops slurmd and slurmctld by their PIDs (TERM, up to 10 s,
#       then KILL), kills left-over job step processes of this cluster; with --munge also stops
#       munged. Idempotent, bounded in time (about 30 s at worst).
#   scripts/slurm-cluster.sh stop-ctld D
#       Stops slurmctld alone (TERM, up to 10 s, then KILL), as a controller restart or outage
#       does: slurmd and running jobs go on; client commands fail until start-ctld.
#   scripts/slurm-cluster.sh start-ctld D
#       Starts slurmctld again from D (its saved state: jobs, node) and waits up to 60 s until
#       it answers.
#   scripts/slurm-cluster.sh restart-ctld D
#       stop-ctld, then start-ctld: a controller restart, as an admin does one.
#   scripts/slurm-cluster.sh status D
#       Shows whether munged, slurmctld and slurmd run, then `sinfo` and `squeue`.
#       Exit 0 when slurmctld and slurmd both run, 3 otherwise.
#
# Client commands (sbatch, squeue, scontrol, sinfo, scancel, ...) need SLURM_CONF=D/etc/slurm.conf.
# There is no slurmdbd: plain `sacct` fails; `sacct -c` reads the job completion file
# D/log/jobcomp.txt. Only one such cluster can run on a machine at a time (fixed ports).
# Where PID 1 reaps orphans only now and then, stopped daemons linger as zombies for a while
# (`pgrep -x slurmd` still lists them): test for live processes with `ps -o stat=`.
set -euo pipefail

PROG=$(basename "$0")
CLIENT_TIMEOUT=5

say() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { say "error: $*"; exit 1; }

usage() {
    sed -n '2,/^set -euo pipefail/{/^#/{s/^# \{0,1\}//;p}}' "$0" >&2
    exit "${1:-2}"
}

# Finds a program on PATH or in the sbin directories; prints its path.
find_bin() {
    local name=$1 dir
    if command -v "$name" >/dev/null 2>&1; then
        command -v "$name"
        return 0
    fi
    for dir in /usr/sbin /sbin /usr/local/sbin; do
        if [[ -x $dir/$name ]]; then
            printf '%s\n' "$dir/$name"
            return 0
        fi
    done
    return 1
}

missing_bins() {
    local name out=()
    for name in slurmctld slurmd sbatch munged "$@"; do
        find_bin "$name" >/dev/null || out+=("$name")
    done
    printf '%s\n' "${out[@]+"${out[@]}"}"
}

is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }

# True when PID is a live (non-zombie) process whose command name is NAME.
alive() {
    local pid=$1 name=$2 stat state comm
    is_uint "$pid" || return 1
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
    state=${stat##*) }
    state=${state%% *}
    [[ $state != Z && $state != X ]] || return 1
    comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
    [[ $comm == "$name" ]]
}

# Prints the live PIDs of daemon NAME of the cluster in $D (from its pid file and the
# PID recorded at launch), without duplicates.
cluster_pids() {
    local name=$1 f pid seen=" "
    for f in "$D/run/$name.pid" "$D/run/$name.launched"; do
        [[ -r $f ]] || continue
        pid=$(tr -dc '0-9' 2>/dev/null <"$f" || true)
        [[ -n $pid && $seen != *" $pid "* ]] || continue
        seen+="$pid "
        if alive "$pid" "$name"; then printf '%s\n' "$pid"; fi
    done
}

# All PIDs in the process trees below the given PIDs (not the PIDs themselves).
descendants() {
    (($# > 0)) || return 0
    ps -e -o pid=,ppid= | awk -v roots="$*" '
        BEGIN { n = split(roots, r, " "); for (i = 1; i <= n; i++) want[r[i]] = 1 }
        { parent[$1] = $2; pids[++m] = $1 }
        END {
            changed = 1
            while (changed) {
                changed = 0
                for (i = 1; i <= m; i++) {
                    p = pids[i]
                    if (!(p in want) && (parent[p] in want)) { want[p] = 1; out[p] = 1; changed = 1 }
                }
            }
            for (p in out) print p
        }'
}

# Sends SIG to the PIDs, waits up to SECS for all to be gone; returns 1 if some remain.
signal_and_wait() {
    local sig=$1 secs=$2 pid left
    shift 2
    (($# > 0)) || return 0
    kill -s "$sig" "$@" 2>/dev/null || true
    local deadline=$((SECONDS + secs))
    while :; do
        left=0
        for pid in "$@"; do
            if [[ -d /proc/$pid ]] && ! grep -q '^State:[[:space:]]*Z' "/proc/$pid/status" 2>/dev/null; then
                left=1
            fi
        done
        ((left)) || return 0
        ((SECONDS < deadline)) || return 1
        sleep 0.2
    done
}

set_cluster_dir() {
    [[ -n ${1:-} ]] || { say "missing cluster directory"; usage 2; }
    case $1 in
        -*) say "missing cluster directory (got option $1)"; usage 2 ;;
    esac
    mkdir -p "$1"
    D=$(cd "$1" && pwd -P)
    [[ $D != *[[:space:]]* ]] || die "cluster directory must not contain whitespace: $D"
    CONF=$D/etc/slurm.conf
    export SLURM_CONF=$CONF
    NODE=$(hostname -s)
}

munge_works() {
    local munge unmunge
    munge=$(find_bin munge) || return 1
    unmunge=$(find_bin unmunge) || return 1
    timeout "$CLIENT_TIMEOUT" "$munge" -n 2>/dev/null | timeout "$CLIENT_TIMEOUT" "$unmunge" >/dev/null 2>&1
}

munged_pid() {
    local pid
    pid=$(tr -dc '0-9' 2>/dev/null </run/munge/munged.pid || true)
    if alive "$pid" munged; then printf '%s\n' "$pid"; fi
}

# ---------------------------------------------------------------------------------------
cmd_install() {
    local missing
    missing=$(missing_bins sinfo squeue scontrol sacct munge unmunge)
    if [[ -z $missing ]]; then
        say "Slurm and munge are already installed"
        return 0
    fi
    say "missing: $(echo "$missing" | tr '\n' ' ')— installing slurm-wlm and munge"
    local -a SUDO=()
    if ((EUID != 0)); then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            SUDO=(sudo -n)
        else
            say "not root and sudo needs a password; run as root:"
            say "  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends slurm-wlm munge"
            exit 2
        fi
    fi
    # Keep the packages' maintainer scripts from starting services (no systemd here, and
    # no config yet): a temporary policy-rc.d unless the machine already has one.
    local policy=/usr/sbin/policy-rc.d made_policy=0
    if [[ ! -e $policy ]]; then
        "${SUDO[@]}" sh -c "printf '#!/bin/sh\nexit 101\n' > $policy && chmod 755 $policy"
        made_policy=1
    fi
    local rc=0 start=$SECONDS
    {
        "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q &&
            "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
                --no-install-recommends slurm-wlm munge
    } >&2 || rc=$?
    if ((made_policy)); then "${SUDO[@]}" rm -f "$policy"; fi
    ((rc == 0)) || die "apt-get failed (exit $rc)"
    missing=$(missing_bins)
    [[ -z $missing ]] || die "still missing after install: $(echo "$missing" | tr '\n' ' ')"
    say "installed in $((SECONDS - start)) s"
}

# ---------------------------------------------------------------------------------------
write_config() {
    local gpus=$1 cpus=$2 mem=$3
    mkdir -p "$D/etc" "$D/state/ctld" "$D/state/d" "$D/run" "$D/log" "$D/dev"
    chmod 755 "$D" "$D/etc" "$D/log"
    # Fake GPU devices: character devices (as /dev/null) for gres.conf's File=.
    rm -f "$D"/dev/gpu*
    local i
    for ((i = 0; i < gpus; i++)); do
        mknod "$D/dev/gpu$i" c 1 3
    done

    # More CPUs or memory than the machine has would leave the node INVAL ("Low CPUs",
    # "Low RealMemory"); config_overrides makes slurmd take the configured values instead.
    local overrides="" have_cpus have_mem
    have_cpus=$(nproc)
    have_mem=$(awk '/^MemTotal:/ { printf "%d", $2 / 1024 }' /proc/meminfo)
    if ((cpus > have_cpus || mem > have_mem)); then
        overrides="SlurmdParameters=config_overrides"
        say "note: $cpus CPUs / $mem MiB exceed the machine's $have_cpus / $have_mem MiB: using $overrides"
    fi

    local gres_types="" node_gres="" gres_line=""
    if ((gpus > 0)); then
        gres_types="GresTypes=gpu"
        node_gres=" Gres=gpu:$gpus"
        if ((gpus == 1)); then
            gres_line="NodeName=$NODE Name=gpu File=$D/dev/gpu0"
        else
            gres_line="NodeName=$NODE Name=gpu File=$D/dev/gpu[0-$((gpus - 1))]"
        fi
    fi

    sed '/^$/d' >"$CONF.tmp" <<EOF
# Written by scripts/slurm-cluster.sh: single-node test cluster in $D
ClusterName=tli-test
SlurmctldHost=$NODE
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
StateSaveLocation=$D/state/ctld
SlurmdSpoolDir=$D/state/d
SlurmctldPidFile=$D/run/slurmctld.pid
SlurmdPidFile=$D/run/slurmd.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
KillWait=10
JobAcctGatherType=jobacct_gather/linux
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$D/log/jobcomp.txt
$overrides
$gres_types
NodeName=$NODE CPUs=$cpus RealMemory=$mem${node_gres} State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
    mv "$CONF.tmp" "$CONF"

    {
        echo "# Written by scripts/slurm-cluster.sh"
        echo "AutoDetect=off"
        if [[ -n $gres_line ]]; then echo "$gres_line"; fi
    } >"$D/etc/gres.conf"

    printf '# Written by scripts/slurm-cluster.sh: source it to use the cluster in %s\nexport SLURM_CONF=%q\n' \
        "$D" "$CONF" >"$D/env.sh"
}

start_munged() {
    if munge_works; then
        say "munged: reusing the running one"
        return 0
    fi
    local munged pid
    munged=$(find_bin munged) || die "munged not found; run: $PROG install"
    pid=$(munged_pid)
    if [[ -n $pid ]]; then
        say "munged (pid $pid) runs but does not answer: restarting it"
        signal_and_wait TERM 5 "$pid" || signal_and_wait KILL 2 "$pid" || true
    fi
    if [[ ! -s /etc/munge/munge.key ]]; then
        say "creating /etc/munge/munge.key"
        mkdir -p /etc/munge
        local mungekey
        if mungekey=$(find_bin mungekey); then
            "$mungekey" --create --keyfile=/etc/munge/munge.key
        else
            dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
        fi
        chown munge:munge /etc/munge/munge.key
        chmod 400 /etc/munge/munge.key
    fi
    mkdir -p /run/munge
    chown munge:munge /run/munge
    chmod 755 /run/munge
    # --force: start even if a stale socket of a dead munged is left behind.
    runuser -u munge -- "$munged" --force >&2 || die "munged failed to start"
    local deadline=$((SECONDS + 10))
    until munge_works; do
        ((SECONDS < deadline)) || die "munged started but 'munge -n | unmunge' fails"
        sleep 0.2
    done
    say "munged: started (pid $(munged_pid))"
}

# Another slurmctld/slurmd not belonging to $D would hold the ports.
check_foreign_daemons() {
    local name pid ours
    for name in slurmctld slurmd; do
        ours=" $(cluster_pids "$name" | tr '\n' ' ') "
        for pid in $(pgrep -x "$name" || true); do
            alive "$pid" "$name" || continue
            [[ $ours == *" $pid "* ]] && continue
            local conf
            conf=$(tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ" | sed -n 's/^SLURM_CONF=//p' | head -n1)
            die "another $name (pid $pid${conf:+, SLURM_CONF=$conf}) is running; stop it first (scripts/slurm-cluster.sh stop DIR, or kill $pid)"
        done
    done
}

# The daemons log to D/log/NAME.log; with -D they also copy it to stderr (D/log/NAME.out),
# which alone holds errors from before the log file is open (e.g. a bad slurm.conf).
show_logs() {
    local name log out
    for name in slurmctld slurmd; do
        log=$D/log/$name.log
        out=$D/log/$name.out
        if [[ -s $log ]]; then
            echo "----- last 30 lines of $log -----" >&2
            tail -n 30 "$log" >&2
            if [[ -s $out ]]; then
                echo "----- last 5 lines of $out -----" >&2
                tail -n 5 "$out" >&2
            fi
        elif [[ -s $out ]]; then
            echo "----- last 30 lines of $out -----" >&2
            tail -n 30 "$out" >&2
        else
            echo "----- $name wrote no log -----" >&2
        fi
    done
}

launch() {
    local name=$1 bin
    bin=$(find_bin "$name") || die "$name not found; run: $PROG install"
    SLURM_CONF=$CONF setsid "$bin" -D -f "$CONF" >>"$D/log/$name.out" 2>&1 </dev/null &
    echo $! >"$D/run/$name.launched"
    disown "$!" 2>/dev/null || true # no "Killed" notice if stop has to KILL it
}

cmd_start() {
    set_cluster_dir "${1:-}"
    shift
    local gpus=2 cpus mem timeout_s=60 clean=0
    cpus=$(nproc)
    mem=$(awk '/^MemTotal:/ { printf "%d", $2 * 0.8 / 1024 }' /proc/meminfo)
    while (($# > 0)); do
        case $1 in
            --gpus) gpus=${2:-}; shift 2 || usage 2 ;;
            --cpus) cpus=${2:-}; shift 2 || usage 2 ;;
            --memory-mb) mem=${2:-}; shift 2 || usage 2 ;;
            --timeout) timeout_s=${2:-}; shift 2 || usage 2 ;;
            --clean) clean=1; shift ;;
            -h | --help) usage 0 ;;
            *) say "unknown option for start: $1"; usage 2 ;;
        esac
    done
    is_uint "$gpus" || die "--gpus wants a number, got '$gpus'"
    if ! is_uint "$cpus" || ((cpus == 0)); then die "--cpus wants a positive number, got '$cpus'"; fi
    if ! is_uint "$mem" || ((mem == 0)); then die "--memory-mb wants a positive number, got '$mem'"; fi
    is_uint "$timeout_s" || die "--timeout wants seconds, got '$timeout_s'"

    local missing
    missing=$(missing_bins sinfo munge unmunge)
    if [[ -n $missing ]]; then
        say "not installed: $(echo "$missing" | tr '\n' ' ')— run: $PROG install"
        exit 2
    fi
    if ((EUID != 0)); then
        say "start must run as root (slurmd and munged need it)"
        exit 2
    fi

    local ctld_pids d_pids
    ctld_pids=$(cluster_pids slurmctld)
    d_pids=$(cluster_pids slurmd)
    if [[ -n $ctld_pids && -n $d_pids ]]; then
        say "cluster already running from $D (slurmctld pid $ctld_pids, slurmd pid $d_pids)"
        printf '%s\n' "$CONF"
        return 0
    fi
    if [[ -n $ctld_pids || -n $d_pids ]]; then
        say "cluster in $D half running: stopping it before starting again"
        stop_daemons
    fi
    check_foreign_daemons

    if ((clean)); then
        say "wiping $D/state"
        rm -rf "$D/state"
    fi
    write_config "$gpus" "$cpus" "$mem"
    rm -f "$D/run/slurmctld.pid" "$D/run/slurmd.pid" "$D"/run/*.launched
    start_munged

    local t0=$SECONDS
    launch slurmctld
    launch slurmd
    say "started slurmctld and slurmd; waiting up to ${timeout_s} s for node $NODE"

    local deadline=$((SECONDS + timeout_s)) state="" why
    while :; do
        if [[ -z $(cluster_pids slurmctld) ]]; then
            sleep 0.5 # the pid file may lag the exec by a moment
            if [[ -z $(cluster_pids slurmctld) ]]; then
                say "slurmctld exited during start-up"
                show_logs
                stop_daemons
                exit 1
            fi
        fi
        if [[ -z $(cluster_pids slurmd) ]]; then
            sleep 0.5
            if [[ -z $(cluster_pids slurmd) ]]; then
                say "slurmd exited during start-up"
                show_logs
                stop_daemons
                exit 1
            fi
        fi
        state=$(timeout "$CLIENT_TIMEOUT" sinfo -h -N -n "$NODE" -o %T 2>/dev/null | head -n1 || true)
        case $state in
            idle | mixed | allocated | completing) break ;;
            *inval* | *drain* | *fail*)
                why=$(timeout "$CLIENT_TIMEOUT" sinfo -h -N -n "$NODE" -o '%E' 2>/dev/null || true)
                say "node $NODE is ${state^^} (reason: ${why:-none given})"
                if [[ $state == *inval* ]]; then
                    say "INVAL: the node's configuration does not match what slurmd found (CPUs, memory, GRES)."
                fi
                show_logs
                say "stopping the daemons; fix the cause, then: $PROG start $D --clean ..."
                stop_daemons
                exit 1
                ;;
        esac
        if ((SECONDS >= deadline)); then
            say "timed out after ${timeout_s} s; node state: '${state:-unknown (sinfo did not answer)}'"
            show_logs
            say "stopping the daemons"
            stop_daemons
            exit 1
        fi
        sleep 0.3
    done
    say "node $NODE is $state after $((SECONDS - t0)) s (cluster tli-test, partition debug, ${gpus} GPU(s), ${cpus} CPU(s), ${mem} MiB)"
    say "use it with: source $D/env.sh   (or export SLURM_CONF=$CONF)"
    printf '%s\n' "$CONF"
}

# ---------------------------------------------------------------------------------------
# Job step daemons and job processes started by this cluster's slurmd carry its SLURM_CONF.
stray_step_pids() {
    local pid
    for pid in $(pgrep -x slurmstepd || true); do
        alive "$pid" slurmstepd || continue
        if tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ" | grep -qxF "SLURM_CONF=$CONF"; then
            printf '%s\n' "$pid"
        fi
    done
}

stop_daemons() {
    local ctld d all
    d=$(cluster_pids slurmd)
    ctld=$(cluster_pids slurmctld)
    # slurmd first: it may ignore TERM for minutes once slurmctld is gone.
    # shellcheck disable=SC2206 # PIDs are digits only
    all=($d $ctld)
    if ((${#all[@]} > 0)); then
        say "stopping slurmd ${d:-(not running)}, slurmctld ${ctld:-(not running)}"
        if ! signal_and_wait TERM 10 "${all[@]}"; then
            say "still running after 10 s: sending KILL"
            signal_and_wait KILL 5 "${all[@]}" || say "warning: some daemon did not die: ${all[*]}"
        fi
    fi
    local steps kids
    steps=$(stray_step_pids | tr '\n' ' ')
    if [[ -n ${steps// /} ]]; then
        # shellcheck disable=SC2086
        kids=$(descendants $steps | tr '\n' ' ')
        say "killing left-over job steps: slurmstepd $steps${kids:+ and job processes $kids}"
        # shellcheck disable=SC2086
        signal_and_wait KILL 5 $steps $kids || say "warning: some job processes did not die"
    fi
    rm -f "$D/run/slurmctld.pid" "$D/run/slurmd.pid" "$D"/run/*.launched
}

cmd_stop_ctld() {
    set_cluster_dir "${1:-}"
    local pids
    pids=$(cluster_pids slurmctld)
    if [[ -z $pids ]]; then
        say "slurmctld of $D is not running"
        return 0
    fi
    say "stopping slurmctld $pids (slurmd and jobs go on)"
    # shellcheck disable=SC2086 # PIDs are digits only
    if ! signal_and_wait TERM 10 $pids; then
        # shellcheck disable=SC2086
        signal_and_wait KILL 5 $pids || die "slurmctld $pids did not die"
    fi
    rm -f "$D/run/slurmctld.pid" "$D/run/slurmctld.launched"
}

cmd_start_ctld() {
    set_cluster_dir "${1:-}"
    [[ -f $CONF ]] || die "no cluster in $D (run: $PROG start $D)"
    if [[ -n $(cluster_pids slurmctld) ]]; then
        say "slurmctld of $D already runs"
        return 0
    fi
    launch slurmctld
    local deadline=$((SECONDS + 60))
    until timeout "$CLIENT_TIMEOUT" squeue -h >/dev/null 2>&1; do
        ((SECONDS < deadline)) || { show_logs; die "slurmctld did not answer within 60 s"; }
        sleep 0.3
    done
    say "slurmctld answers again"
}

cmd_stop() {
    set_cluster_dir "${1:-}"
    shift
    local stop_munge=0
    while (($# > 0)); do
        case $1 in
            --munge) stop_munge=1; shift ;;
            -h | --help) usage 0 ;;
            *) say "unknown option for stop: $1"; usage 2 ;;
        esac
    done
    local ctld d
    ctld=$(cluster_pids slurmctld)
    d=$(cluster_pids slurmd)
    if [[ -z $ctld && -z $d ]]; then
        say "no slurmctld or slurmd running from $D"
    fi
    if [[ -n $ctld && -n $d ]] && command -v squeue >/dev/null 2>&1; then
        local job_ids
        job_ids=$(timeout "$CLIENT_TIMEOUT" squeue -h -o %i 2>/dev/null | tr '\n' ' ' || true)
        if [[ -n ${job_ids// /} ]]; then
            say "cancelling jobs: $job_ids"
            # shellcheck disable=SC2086 # job ids are digits only
            timeout "$CLIENT_TIMEOUT" scancel $job_ids 2>/dev/null || true
            local deadline=$((SECONDS + 5))
            while ((SECONDS < deadline)); do
                [[ -z $(timeout "$CLIENT_TIMEOUT" squeue -h -o %i 2>/dev/null || true) ]] && break
                sleep 0.3
            done
        fi
    fi
    stop_daemons
    if ((stop_munge)); then
        local pid
        pid=$(munged_pid)
        if [[ -n $pid ]]; then
            say "stopping munged (pid $pid)"
            signal_and_wait TERM 10 "$pid" || signal_and_wait KILL 5 "$pid" ||
                say "warning: munged (pid $pid) did not die"
        else
            say "munged is not running"
        fi
    fi
    say "stopped"
}

# ---------------------------------------------------------------------------------------
describe() { if [[ -n ${2// /} ]]; then echo "$1running (pid ${2% })"; else echo "$1not running"; fi; }

cmd_status() {
    set_cluster_dir "${1:-}"
    shift
    (($# == 0)) || { say "unknown option for status: $1"; usage 2; }
    local ctld d mpid rc=0
    ctld=$(cluster_pids slurmctld | tr '\n' ' ')
    d=$(cluster_pids slurmd | tr '\n' ' ')
    mpid=$(munged_pid)
    echo "cluster dir: $D"
    echo "SLURM_CONF:  $CONF"
    describe "munged:      " "$mpid"
    describe "slurmctld:   " "$ctld"
    describe "slurmd:      " "$d"
    if [[ -z $ctld || -z $d ]]; then rc=3; fi
    if [[ -n $ctld && -r $CONF ]]; then
        echo "--- sinfo"
        timeout "$CLIENT_TIMEOUT" sinfo -N -o '%N %P %T %c %m %G %E' || echo "(sinfo failed or timed out)"
        echo "--- squeue"
        timeout "$CLIENT_TIMEOUT" squeue -o '%i %P %j %T %M %R %b' || echo "(squeue failed or timed out)"
    fi
    return "$rc"
}

# ---------------------------------------------------------------------------------------
case ${1:-} in
    install) shift; (($# == 0)) || { say "install takes no arguments"; usage 2; }; cmd_install ;;
    start) shift; cmd_start "$@" ;;
    stop) shift; cmd_stop "$@" ;;
    stop-ctld) shift; cmd_stop_ctld "$@" ;;
    start-ctld) shift; cmd_start_ctld "$@" ;;
    restart-ctld) shift; cmd_stop_ctld "$@" && cmd_start_ctld "$@" ;;
    status) shift; cmd_status "$@" ;;
    -h | --help | help) usage 0 ;;
    *) usage 2 ;;
esac
