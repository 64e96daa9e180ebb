#!/usr/bin/env bash
# Nsight Compute facts for each rung of the FP32 ladder (one launch each at N^3):
# FMA-pipe use, shared-memory wavefronts and bank conflicts, global sectors per
# request (coalescing), occupancy, and the main stall reasons.  CSV to $1.
set -u
out=${1:-ncu.csv}
n=${2:-4096}
metrics=(
  gpu__time_duration.sum
  sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active
  sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active
  l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed
  l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum
  l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum
  l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum
  smsp__sass_thread_inst_executed_op_ffma_pred_on.sum
  smsp__inst_executed.sum
  l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum
  l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum
  dram__bytes_read.sum
  sm__warps_active.avg.pct_of_peak_sustained_active
  launch__registers_per_thread
  launch__occupancy_limit_registers
  smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio
  smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio
  smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio
  smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio
  smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio
  smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio
  smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio
)
IFS=,; list="${metrics[*]}"; unset IFS
if ! ncu --clock-control none --kernel-name-base demangled -k regex:gemmlab:: --metrics "$list" --csv python3 scripts/profile_top.py "$n" --ladder > "$out"; then
  echo "metric list refused; falling back to ncu's standard sections" >&2
  ncu --clock-control none --kernel-name-base demangled -k regex:gemmlab:: --csv --page details --section SpeedOfLight \
    --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section Occupancy \
    --section WarpStateStats --section LaunchStats python3 scripts/profile_top.py "$n" --ladder > "$out"
fi
