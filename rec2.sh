#!/bin/bash
# rec2.sh tag cmd...: perf record sched+syscalls for 0.4 s starting DELAY s into cmd
F="id==1||id==44||id==45||id==47"; EV="-e sched:sched_switch --exclude-perf -e sched:sched_wakeup --exclude-perf -e raw_syscalls:sys_enter --filter $F --exclude-perf -e raw_syscalls:sys_exit --filter $F --exclude-perf -e ipi:ipi_send_cpu --exclude-perf"
tag=$1; shift
"$@" > /tmp/rrt/out-$tag.txt 2>&1 &
sleep ${DELAY:-1.2}
perf record -q -a -m 8M $EV -o /tmp/rrt/$tag.data -- sleep 0.4
wait
perf script -i /tmp/rrt/$tag.data -F comm,pid,tid,cpu,time,event,trace --ns 2>/dev/null | python3 /tmp/rrt/tl2.py > /tmp/rrt/$tag.tl
echo "== $tag $(grep -o '"p50":[0-9.]*' /tmp/rrt/out-$tag.txt | tail -1) $(grep 'percentile 50.000' /tmp/rrt/out-$tag.txt)"; cat /tmp/rrt/$tag.tl
