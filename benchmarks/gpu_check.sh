#!/usr/bin/env bash
# The check for a machine with NVIDIA GPUs (docs/development.md, "On a GPU
# machine"), a few minutes, every step under a time limit:
#   1. numa_facts on this host from NVML, nvidia-smi and sysfs, compared with
#      nvidia-smi's own GPU list and sysfs (GPUs, bus ids, NUMA nodes)
#   2. the pinned CUDA vLLM (roles/vllm/defaults vllm_version) serving the tiny
#      model of tests/fixtures/tiny_model.py on one GPU, under the unit the
#      role renders, with the default sandbox and then vllm_hardening_strict;
#      each answers a completion (needs root and a running systemd)
#   3. pinned host-to-device and device-to-host bandwidth from each NUMA node
#      to each GPU (numactl --cpunodebind=N --membind=N), as a table
#   4. playbooks/measure_bandwidth.yml on this host with the engine venv's
#      torch: memory per pair of nodes, the copies per node and GPU, the verdict
# Without a GPU it says so and exits 0. Exit 1 when a step failed.
#
#   benchmarks/gpu_check.sh [--wheels DIR] [--venv DIR] [--work DIR]
#     --wheels DIR  install vllm==<pinned> from this folder (pip --no-index), for a machine without PyPI
#     --venv DIR    a venv that already has the pinned vllm (nothing installed)
#     --work DIR    where the venv, model and units go (default /var/lib/gpufleet-check:
#                   not under /tmp or /home, which the units' sandbox hides)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
repo=$(pwd)
wheels="" venv="" work=/var/lib/gpufleet-check
while (($#)); do
  case "$1" in
    --wheels) wheels=$2; shift 2 ;;
    --venv) venv=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    *) echo "usage: benchmarks/gpu_check.sh [--wheels DIR] [--venv DIR] [--work DIR]" >&2; exit 2 ;;
  esac
done

if ! command -v nvidia-smi >/dev/null; then
  echo "gpu_check: no NVIDIA GPU here (nvidia-smi not found): nothing measured"
  exit 0
fi
if ! listing=$(timeout 60 nvidia-smi -L 2>&1) || ! grep -q '^GPU [0-9]' <<<"$listing"; then
  echo "gpu_check: no NVIDIA GPU here (nvidia-smi -L: ${listing:-no output}): nothing measured"
  exit 0
fi
echo "$listing"

version=$(sed -n 's/^vllm_version: "\(.*\)"$/\1/p' roles/vllm/defaults/main.yml)
export ANSIBLE_CONFIG=$repo/ansible.cfg ANSIBLE_NOCOLOR=1
ansible_playbook=$repo/.venv/bin/ansible-playbook
failed=()
step() { echo; echo "=== gpu_check: $*"; }
fail() { echo "gpu_check: FAILED: $*"; failed+=("$*"); }
mkdir -p "$work" || { echo "gpu_check: cannot create $work" >&2; exit 1; }

# --- the engine venv --------------------------------------------------------
step "vllm==$version venv"
if [ -z "$venv" ]; then
  venv=$work/venv
  if [ ! -x "$venv/bin/vllm" ]; then
    python3 -m venv "$venv"
    if [ -n "$wheels" ]; then
      timeout 900 "$venv/bin/pip" install -q --no-index --find-links "$wheels" "vllm==$version"
    else
      timeout 900 "$venv/bin/pip" install -q "vllm==$version"
    fi || fail "pip install vllm==$version"
  fi
fi
python=$venv/bin/python
timeout 120 "$python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__, 'CUDA', torch.version.cuda)" \
  || fail "importing vllm and torch from $venv"

# --- 1. numa_facts against nvidia-smi and sysfs -----------------------------
step "numa_facts (NVML, nvidia-smi, sysfs) against nvidia-smi and sysfs"
cat >"$work/facts.yml" <<'YAML'
- name: numa_facts from each source
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Read the topology
      gpufleet.numa.numa_facts:
        nvml: "{{ item.nvml }}"
        nvidia_smi: "{{ item.smi }}"
      loop:
        - {source: nvml, nvml: true, smi: nvidia-smi}
        - {source: nvidia-smi, nvml: false, smi: nvidia-smi}
        - {source: sysfs, nvml: false, smi: /nonexistent/nvidia-smi}
      register: __facts
    - name: Keep each source's facts
      ansible.builtin.copy:
        content: "{{ item.ansible_facts.numa_topology | to_json }}"
        dest: "{{ out }}/facts-{{ item.item.source }}.json"
        mode: "0644"
      loop: "{{ __facts.results }}"
      loop_control: {label: "{{ item.item.source }}"}
YAML
# The engine venv's Python runs the module: it has pynvml (nvidia-ml-py, a vllm dependency).
if timeout 300 "$ansible_playbook" -i localhost, "$work/facts.yml" -e "out=$work" \
    -e "ansible_python_interpreter=$python" >"$work/facts.log" 2>&1; then
  timeout 120 "$python" benchmarks/gpu_check.py compare "$work" || fail "numa_facts sources disagree"
else
  tail -n 30 "$work/facts.log"
  fail "numa_facts"
fi

# --- 2. the pinned engine under the rendered unit ---------------------------
serve_unit() {  # serve_unit STRICT(true|false)
  local strict=$1 render=$work/render-$1 key unit port reply
  key=gpufleet-check-$RANDOM$RANDOM
  rm -rf "$render"
  cat >"$work/unit.yml" <<'YAML'
- name: One vLLM unit on this host's first GPU
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Read the topology
      gpufleet.numa.numa_facts:
    - name: Render the unit with the role
      ansible.builtin.include_role:
        name: gpufleet.numa.vllm
      vars:
        vllm_instances: "{{ (hostvars | gpufleet.numa.fleet_plan(tp_size=1, hosts=['localhost'])).instances[:1] }}"
YAML
  cat >"$work/unit-vars.json" <<JSON
{"vllm_install": false, "vllm_executable": "$venv/bin/vllm", "vllm_model": "$work/model",
 "vllm_served_model_name": "tiny", "vllm_download_weights": false, "vllm_api_key": "$key",
 "vllm_hardening_strict": $strict, "vllm_manage_service": false, "vllm_numactl": "$(command -v numactl)",
 "vllm_state_dir": "$work/state", "vllm_config_dir": "$render/etc", "vllm_unit_dir": "$render/units",
 "vllm_libexec_dir": "$work/libexec",
 "vllm_extra_args": {"max-model-len": 256, "gpu-memory-utilization": 0.3, "enforce-eager": true},
 "ansible_python_interpreter": "$python"}
JSON
  if ! timeout 300 "$ansible_playbook" -i localhost, "$work/unit.yml" -e "@$work/unit-vars.json" \
      >"$work/render-$strict.log" 2>&1; then
    tail -n 30 "$work/render-$strict.log"
    fail "rendering the unit (vllm_hardening_strict $strict)"
    return
  fi
  unit=$(find "$render/units" -name '*.service' -printf '%f\n' | sort | head -n 1)
  port=$(grep -o -- '--port [0-9]*' "$render/units/$unit" | cut -d' ' -f2)
  sed -n '/^ExecStart=/,/[^\\]$/p' "$render/units/$unit"
  cp "$render/units/$unit" /run/systemd/system/
  systemctl daemon-reload
  local started=$SECONDS
  if timeout 900 systemctl start "$unit"; then
    echo "started in $((SECONDS - started)) s"
    reply=$(timeout 120 curl -sS --fail-with-body -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
      -d '{"model": "tiny", "prompt": "Hello, world", "max_tokens": 8}' "http://127.0.0.1:$port/v1/completions")
    if grep -q '"choices"' <<<"$reply"; then
      echo "completion: ${reply:0:300}"
    else
      fail "completion (vllm_hardening_strict $strict): ${reply:-no reply}"
    fi
    systemctl show -p NUMAPolicy -p NUMAMask -p CPUAffinity "$unit"
  else
    fail "starting $unit (vllm_hardening_strict $strict)"
  fi
  journalctl -u "$unit" -n 20 --no-pager -o cat 2>/dev/null | tail -n 20
  timeout 180 systemctl stop "$unit"
  rm -f "/run/systemd/system/$unit"
  systemctl daemon-reload
}

step "the tiny model"
if [ "$(id -u)" != 0 ] || [ ! -d /run/systemd/system ]; then
  fail "engine under the unit: needs root and a running systemd (uid $(id -u), /run/systemd/system $( [ -d /run/systemd/system ] && echo present || echo absent))"
elif ! timeout 300 "$python" tests/fixtures/tiny_model.py "$work/model" >"$work/model.log" 2>&1; then
  tail -n 20 "$work/model.log"
  fail "making the tiny model"
else
  chmod -R a+rX "$work/model" "$venv"
  chmod a+x "$work"
  for strict in false true; do
    step "vLLM $version under the rendered unit, vllm_hardening_strict $strict"
    serve_unit "$strict"
  done
fi

# --- 3. pinned H2D / D2H bandwidth per NUMA node and GPU ---------------------
step "pinned host-device bandwidth, 256 MiB, best of 5 (GB/s)"
header=--header
for node_dir in /sys/devices/system/node/node[0-9]*; do
  node=${node_dir##*node}
  [ -n "$(cat "$node_dir/cpulist")" ] || continue  # a memory-only node has no CPUs to run on
  timeout 300 numactl --cpunodebind="$node" --membind="$node" "$python" benchmarks/gpu_check.py bandwidth \
    --node "$node" --size-mib 256 --reps 5 $header || fail "bandwidth from node $node"
  header=
done

# --- 4. the bandwidth playbook on this host ----------------------------------
step "playbooks/measure_bandwidth.yml on this host (the engine venv's torch)"
mkdir -p "$work/bandwidth-inventory"
cat >"$work/bandwidth-inventory/hosts.yml" <<YAML
all:
  children:
    gpu_servers:
      hosts:
        localhost:
          ansible_connection: local
          ansible_python_interpreter: "{{ ansible_playbook_python }}"
          gpufleet_bandwidth_python: $python
          gpufleet_bandwidth_timeout: 300
YAML
if timeout 900 "$ansible_playbook" "$repo/playbooks/measure_bandwidth.yml" -i "$work/bandwidth-inventory" \
    >"$work/bandwidth.log" 2>&1; then
  sed -n '/TASK \[Show the figures and the verdict\]/,/^$/p' "$work/bandwidth.log" | tail -n +2
  grep -q "from node [0-9]*: H2D" "$work/bandwidth.log" || fail "measure_bandwidth.yml: no host-device copy measured"
else
  tail -n 30 "$work/bandwidth.log"
  fail "measure_bandwidth.yml"
fi

echo
if ((${#failed[@]})); then
  echo "gpu_check: ${#failed[@]} step(s) failed:"
  printf '  %s\n' "${failed[@]}"
  exit 1
fi
echo "gpu_check: every step passed"
