#!/bin/bash
# 10M nbtree alternation: a19f54e (old, finish in one go) against the merged finish branch (new).
# Release builds (no fat LTO) of each commit, named as below; DIR and OUT are where the runs go.
set -e
for run in old-a new-a new-b old-b; do
  case $run in old*) bin=woods-a19f54e;; new*) bin=woods-f4fa7bd;; esac
  $bin bench --engines woods:nbtree --records 10000000 --key-size 8 --value-size 128 --background-threads 2 --workloads fillrandom --cache-bytes 425000000 --dir DIR --out OUT/$run > $run.log 2>&1
done
