; The native runtime (see runtime.py): a thread pool for the parallel stages of kernels,
; and the Ctrl-C wrapper of native programs' calls. Parsed and linked with the host's spin-wait
; hint by runtime.runtime_ir(); tests/backend/llvm/test_runtime.py parses and verifies it.
;
; pthread objects are opaque here: 128 bytes covers glibc's and musl's mutex and condition
; variable on 64-bit targets; they are initialised by pthread_*_init, never by layout.
@job       = internal global i64 0          ; {generation:32 | chunks:16 | next:16}
@job_task  = internal global ptr null
@job_ctx   = internal global ptr null
@job_extent = internal global i64 0
@done      = internal global i64 0          ; chunks finished in the current job
@busy      = internal global i32 0          ; 1 while a job is running
@sleepers  = internal global i64 0          ; workers waiting on @wake
@workers   = internal global i64 0          ; worker threads started (0 in a forked child)
@mutex     = internal global [128 x i8] zeroinitializer, align 64
@wake      = internal global [128 x i8] zeroinitializer, align 64
@interrupted = internal global i32 0        ; set by a SIGINT during an interruptible run

declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_mutex_init(ptr, ptr)
declare i32 @pthread_mutex_lock(ptr)
declare i32 @pthread_mutex_unlock(ptr)
declare i32 @pthread_cond_init(ptr, ptr)
declare i32 @pthread_cond_wait(ptr, ptr)
declare i32 @pthread_cond_broadcast(ptr)
declare i32 @sigaction(i32, ptr, ptr)
declare i32 @clock_gettime(i32, ptr)

; The CPU's spin-wait hint (x86's pause), defined for the host by runtime.py.
declare void @relaydsl_spin_hint()

; Runs chunks of the job whose word is %w until none is left: claim with a CAS, run, count.
define internal void @claim_and_run(i64 %w0) {
entry:
  br label %claim
claim:
  %w = phi i64 [%w0, %entry], [%seen, %retry], [%again, %run]
  %chunks = and i64 %w, 4294901760          ; bits 16-31
  %nchunks = lshr i64 %chunks, 16
  %next = and i64 %w, 65535
  %left = icmp ult i64 %next, %nchunks
  br i1 %left, label %try, label %out
try:
  %task = load atomic ptr, ptr @job_task monotonic, align 8
  %ctx = load atomic ptr, ptr @job_ctx monotonic, align 8
  %extent = load atomic i64, ptr @job_extent monotonic, align 8
  %w1 = add i64 %w, 1
  %pair = cmpxchg ptr @job, i64 %w, i64 %w1 seq_cst seq_cst
  %ok = extractvalue { i64, i1 } %pair, 1
  %seen = extractvalue { i64, i1 } %pair, 0
  br i1 %ok, label %run, label %retry
retry:
  br label %claim
run:
  %lo.m = mul i64 %next, %extent
  %begin = udiv i64 %lo.m, %nchunks
  %n1 = add i64 %next, 1
  %hi.m = mul i64 %n1, %extent
  %end = udiv i64 %hi.m, %nchunks
  call void %task(ptr %ctx, i64 %begin, i64 %end)
  %d = atomicrmw add ptr @done, i64 1 release
  %again = load atomic i64, ptr @job acquire, align 8
  br label %claim
out:
  ret void
}

; Nanoseconds on the monotonic clock (Linux's CLOCK_MONOTONIC is 1; a vDSO call, ~20 ns).
define internal i64 @now_ns() {
  %ts = alloca { i64, i64 }, align 8
  %r = call i32 @clock_gettime(i32 1, ptr %ts)
  %sp = getelementptr { i64, i64 }, ptr %ts, i32 0, i32 0
  %np = getelementptr { i64, i64 }, ptr %ts, i32 0, i32 1
  %s = load i64, ptr %sp
  %n = load i64, ptr %np
  %sn = mul i64 %s, 1000000000
  %t = add i64 %sn, %n
  ret i64 %t
}

define internal ptr @worker(ptr %arg) {
entry:
  %w0 = load atomic i64, ptr @job acquire, align 8
  %g0 = lshr i64 %w0, 32
  br label %wait
wait:                                        ; spin until the generation moves on
  %gen = phi i64 [%g0, %entry], [%gen, %spin], [%gen, %asleep], [%g.new, %worked]
  %i = phi i64 [0, %entry], [%i.next, %spin], [0, %asleep], [0, %worked]
  %until = phi i64 [0, %entry], [%until.next, %spin], [0, %asleep], [0, %worked]
  %w = load atomic i64, ptr @job acquire, align 8
  %g = lshr i64 %w, 32
  %new = icmp ne i64 %g, %gen
  br i1 %new, label %work, label %idle
work:
  call void @claim_and_run(i64 %w)
  br label %worked
worked:
  %g.new = phi i64 [%g, %work]
  br label %wait
idle:                                        ; spin for SPIN_NS, reading the clock every 64
  %first = icmp eq i64 %i, 0
  br i1 %first, label %arm, label %tick
arm:
  %t0 = call i64 @now_ns()
  %until0 = add i64 %t0, 200000              ; SPIN_NS: 200 us (see runtime.py)
  br label %spin
tick:
  %low = and i64 %i, 63
  %look = icmp eq i64 %low, 0
  br i1 %look, label %clock, label %spin
clock:
  %t = call i64 @now_ns()
  %over = icmp sgt i64 %t, %until
  br i1 %over, label %sleep, label %spin
spin:
  %until.next = phi i64 [%until0, %arm], [%until, %tick], [%until, %clock]
  call void @relaydsl_spin_hint()
  %i.next = add i64 %i, 1
  br label %wait
sleep:                                       ; Dekker with the publisher: sleepers, then job
  %l = call i32 @pthread_mutex_lock(ptr @mutex)
  %s = atomicrmw add ptr @sleepers, i64 1 seq_cst
  br label %check
check:
  %w2 = load atomic i64, ptr @job seq_cst, align 8
  %g2 = lshr i64 %w2, 32
  %same = icmp eq i64 %g2, %gen
  br i1 %same, label %block, label %awake
block:
  %c = call i32 @pthread_cond_wait(ptr @wake, ptr @mutex)
  br label %check
awake:
  %s2 = atomicrmw sub ptr @sleepers, i64 1 seq_cst
  %u = call i32 @pthread_mutex_unlock(ptr @mutex)
  br label %asleep
asleep:
  br label %wait
}

; Starts %n workers (once); returns the number of threads a parallel loop uses.
define i64 @relaydsl_pool_start(i64 %n) {
entry:
  %have = load i64, ptr @workers
  %started = icmp ne i64 %have, 0
  br i1 %started, label %done, label %init
init:
  %a = call i32 @pthread_mutex_init(ptr @mutex, ptr null)
  %b = call i32 @pthread_cond_init(ptr @wake, ptr null)
  %tid = alloca i64
  br label %loop
loop:
  %i = phi i64 [0, %init], [%i.next, %next]
  %more = icmp slt i64 %i, %n
  br i1 %more, label %spawn, label %fin
spawn:
  %r = call i32 @pthread_create(ptr %tid, ptr null, ptr @worker, ptr null)
  %ok = icmp eq i32 %r, 0
  br i1 %ok, label %next, label %fin
next:
  %i.next = add i64 %i, 1
  store i64 %i.next, ptr @workers
  br label %loop
fin:
  br label %done
done:
  %w = load i64, ptr @workers
  %t = add i64 %w, 1
  ret i64 %t
}

; In a forked child the workers are gone: every loop runs on the calling thread.
define void @relaydsl_pool_forget() {
  store i64 0, ptr @workers
  store i64 0, ptr @sleepers
  store i32 0, ptr @busy
  ret void
}

define i64 @relaydsl_pool_threads() {
  %w = load i64, ptr @workers
  %t = add i64 %w, 1
  ret i64 %t
}

define void @relaydsl_parallel_for(ptr %task, ptr %ctx, i64 %extent) {
entry:
  %w = load i64, ptr @workers
  %none = icmp eq i64 %w, 0
  %small = icmp slt i64 %extent, 2
  %serial0 = or i1 %none, %small
  br i1 %serial0, label %inline, label %claim_pool
claim_pool:
  %pair = cmpxchg ptr @busy, i32 0, i32 1 acquire monotonic
  %got = extractvalue { i32, i1 } %pair, 1
  br i1 %got, label %publish, label %inline
inline:
  call void %task(ptr %ctx, i64 0, i64 %extent)
  ret void
publish:
  %threads = add i64 %w, 1
  %few = icmp ult i64 %extent, %threads
  %nchunks = select i1 %few, i64 %extent, i64 %threads
  store atomic ptr %task, ptr @job_task monotonic, align 8
  store atomic ptr %ctx, ptr @job_ctx monotonic, align 8
  store atomic i64 %extent, ptr @job_extent monotonic, align 8
  store atomic i64 0, ptr @done monotonic, align 8
  %old = load i64, ptr @job
  %gen = lshr i64 %old, 32
  %gen1 = add i64 %gen, 1
  %genbits = shl i64 %gen1, 32
  %chunkbits = shl i64 %nchunks, 16
  %word = or i64 %genbits, %chunkbits
  store atomic i64 %word, ptr @job seq_cst, align 8
  %sleeping = load atomic i64, ptr @sleepers seq_cst, align 8
  %anyone = icmp ne i64 %sleeping, 0
  br i1 %anyone, label %wake_all, label %work
wake_all:
  %l = call i32 @pthread_mutex_lock(ptr @mutex)
  %bc = call i32 @pthread_cond_broadcast(ptr @wake)
  %u = call i32 @pthread_mutex_unlock(ptr @mutex)
  br label %work
work:
  call void @claim_and_run(i64 %word)
  br label %join
join:
  %d = load atomic i64, ptr @done acquire, align 8
  %all = icmp uge i64 %d, %nchunks
  br i1 %all, label %finish, label %pause
pause:
  call void @relaydsl_spin_hint()
  br label %join
finish:
  store atomic i32 0, ptr @busy release, align 4
  ret void
}

; A SIGINT handler: async-signal-safe, it only sets the flag an interruptible run polls.
define internal void @on_interrupt(i32 %signal) {
  store atomic i32 1, ptr @interrupted monotonic, align 4
  ret void
}

; Calls a native program's entry (native/program.py: ``i64 run(ptr state, ptr slots)``) with
; @on_interrupt as the SIGINT handler, then puts the previous handler back (the whole
; sigaction, flags included): the state's stop-flag word (index 7) points at @interrupted,
; which native code polls at each call and loop turn. Returns the run's code, plus 256 when
; a SIGINT came. The struct sigaction is opaque here but for its first field, the handler
; (glibc, musl and Darwin): 256 zeroed bytes cover it, with an empty mask and no flags.
define i64 @relaydsl_call_interruptible(ptr %fn, ptr %st, ptr %slots) {
entry:
  %new = alloca [256 x i8], align 16
  %old = alloca [256 x i8], align 16
  call void @llvm.memset.p0.i64(ptr %new, i8 0, i64 256, i1 false)
  store ptr @on_interrupt, ptr %new
  store atomic i32 0, ptr @interrupted monotonic, align 4
  %stop = getelementptr i64, ptr %st, i64 7
  store ptr @interrupted, ptr %stop
  %installed = call i32 @sigaction(i32 2, ptr %new, ptr %old)
  %code = call i64 %fn(ptr %st, ptr %slots)
  %ok = icmp eq i32 %installed, 0
  br i1 %ok, label %restore, label %done
restore:
  %r = call i32 @sigaction(i32 2, ptr %old, ptr null)
  br label %done
done:
  %flag = load atomic i32, ptr @interrupted monotonic, align 4
  %came = icmp ne i32 %flag, 0
  %bit = select i1 %came, i64 256, i64 0
  %result = or i64 %code, %bit
  ret i64 %result
}

declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)
