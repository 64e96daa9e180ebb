#!/usr/bin/env bash
# Nsight Compute facts for each tensor-core rung (one launch each at N^3, in the
# dtype given: bf16, fp16 or tf32) and for the error-corrected rungs (fp16_ec):
# tensor-pipe use (HMMA for wmma/mma.sync, GMMA for wgmma), SM, L2 and DRAM
# throughput, shared-memory wavefronts and bank conflicts, occupancy and the
# main stall reasons.  CSV to $1.  Usage: scripts/profile_tensor.sh out.csv 4096 bf16
set -u
out=${1:-ncu-tensor.csv}
n=${2:-4096}
dtype=${3:-bf16}
metrics=(
  gpu__time_duration.sum
  sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
  sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active
  sm__throughput.avg.pct_of_peak_sustained_elapsed
  lts__throughput.avg.pct_of_peak_sustained_elapsed
  dram__throughput.avg.pct_of_peak_sustained_elapsed
  l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed
  l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum
  l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum
  smsp__inst_executed.sum
  sm__warps_active.avg.pct_of_peak_sustained_active
  launch__registers_per_thread
  smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio
  smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio
  smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio
  smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio
  smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio
  smsp__average_warps_issue_stalled_wait_per_issue_active.ratio
)
IFS=,; list="${metrics[*]}"; unset IFS
run() {   # $@: profile_top.py arguments after the size
  if ! ncu --clock-control none --kernel-name-base demangled -k regex:gemmlab:: --metrics "$list" --csv \
      python3 scripts/profile_top.py "$n" "$@"; then
    echo "metric list refused; falling back to ncu's standard sections" >&2
    ncu --clock-control none --kernel-name-base demangled -k regex:gemmlab:: --csv --page details \
      --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
      --section Occupancy --section WarpStateStats python3 scripts/profile_top.py "$n" "$@"
  fi
}
{ run --tensor "$dtype"; run --ec; } > "$out"
