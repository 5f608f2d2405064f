/* LD_PRELOAD clock skew for one process (built and used by skew.rs beside this file).
 *
 * Overrides clock_gettime(CLOCK_REALTIME / CLOCK_REALTIME_COARSE), gettimeofday
 * and time. The real clock is read with the raw syscall (never through libc or
 * the vDSO symbols this file replaces), so there is no recursion and nothing
 * allocates: that is what makes libfaketime hang Debian's redis-server
 * (jemalloc calls the clock while initialising, libfaketime calls dlsym, which
 * allocates). Other clocks (MONOTONIC, ...) pass through the raw syscall.
 *
 *   fake = anchor_fake + (real - anchor_real) * rate
 *
 * At load: rate = SKEW_RATE (default 1), anchor_fake = real + SKEW_OFFSET_MS.
 * If SKEW_CONTROL names a file holding "rate offset_ms", it is re-read at most
 * every REFRESH_NS of real time (on a clock read). A new offset jumps the clock
 * by the difference; a new rate changes the speed from now on without a jump.
 * The three parameters are published with a seqlock (atomics only). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define NS 1000000000LL
#define REFRESH_NS 1000000LL /* keep in sync with skew.rs */

static _Atomic long long anchor_real, anchor_fake, rate_ppb = NS, offset_ms;
static _Atomic unsigned seq;           /* odd while the parameters change */
static atomic_flag updating = ATOMIC_FLAG_INIT;
static _Atomic long long last_check;   /* real ns of the last control read */
static char control[4096];             /* control file path, "" if none */

static const char *skip_ws(const char *s) {
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') s++;
    return s;
}

/* "2", "0.5", "1.25" -> parts per billion; NULL when malformed. */
static const char *parse_rate(const char *s, long long *ppb) {
    long long whole = 0, frac = 0, scale = NS;
    int digits = 0;
    for (s = skip_ws(s); *s >= '0' && *s <= '9' && whole < 1000000; s++, digits++)
        whole = whole * 10 + (*s - '0');
    if (*s == '.')
        for (s++; *s >= '0' && *s <= '9'; s++, digits++)
            if (scale > 1) { scale /= 10; frac += (*s - '0') * scale; }
    if (!digits) return NULL;
    *ppb = whole * NS + frac;
    return s;
}

/* "-1500", "+10000", "0" -> milliseconds; NULL when malformed. */
static const char *parse_ms(const char *s, long long *ms) {
    long long v = 0, sign = 1;
    int digits = 0;
    s = skip_ws(s);
    if (*s == '-' || *s == '+') sign = (*s++ == '-') ? -1 : 1;
    for (; *s >= '0' && *s <= '9' && v < 1000000000000LL; s++, digits++)
        v = v * 10 + (*s - '0');
    if (!digits) return NULL;
    *ms = sign * v;
    return s;
}

static long long fake_at(long long real) {
    unsigned s1, s2;
    long long ar, af, r;
    do {
        s1 = seq;
        ar = anchor_real;
        af = anchor_fake;
        r = rate_ppb;
        s2 = seq;
    } while ((s1 & 1) || s1 != s2);
    return af + (long long)((__int128)(real - ar) * r / NS);
}

/* Called with `updating` held, so there is a single writer. */
static void publish(long long real, long long fake, long long ppb, long long ms) {
    seq++;
    anchor_real = real;
    anchor_fake = fake;
    rate_ppb = ppb;
    offset_ms = ms;
    seq++;
}

static void maybe_refresh(long long real) {
    long long last = last_check, ppb, ms;
    char buf[128];
    if (!control[0] || (real >= last && real - last < REFRESH_NS)) return;
    if (atomic_flag_test_and_set(&updating)) return;
    last_check = real;
    int fd = (int)syscall(SYS_openat, AT_FDCWD, control, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        long n = syscall(SYS_read, fd, buf, sizeof buf - 1);
        syscall(SYS_close, fd);
        const char *rest;
        if (n > 0) {
            buf[n] = 0;
            if ((rest = parse_rate(buf, &ppb)) && parse_ms(rest, &ms) &&
                (ppb != rate_ppb || ms != offset_ms))
                publish(real, fake_at(real) + (ms - offset_ms) * 1000000, ppb, ms);
        }
    }
    atomic_flag_clear(&updating);
}

static int real_ns(clockid_t clk, long long *out) {
    struct timespec ts;
    if (syscall(SYS_clock_gettime, clk, &ts) != 0) return -1;
    *out = ts.tv_sec * NS + ts.tv_nsec;
    return 0;
}

__attribute__((constructor)) static void skew_init(void) {
    long long ppb = NS, ms = 0, real;
    const char *rate = getenv("SKEW_RATE"), *off = getenv("SKEW_OFFSET_MS");
    const char *path = getenv("SKEW_CONTROL");
    if (rate) parse_rate(rate, &ppb);
    if (off) parse_ms(off, &ms);
    if (real_ns(CLOCK_REALTIME, &real) != 0) return;
    atomic_flag_test_and_set(&updating);
    publish(real, real + ms * 1000000, ppb, ms);
    atomic_flag_clear(&updating);
    if (path) {
        size_t i = 0;
        for (; path[i] && i < sizeof control - 1; i++) control[i] = path[i];
        control[path[i] ? 0 : i] = 0; /* too long: no control file */
        last_check = real - 2 * REFRESH_NS;
        maybe_refresh(real);
    }
}

static long long fake_now(clockid_t clk, int *err) {
    long long real;
    if (real_ns(clk, &real) != 0) { *err = 1; return 0; }
    maybe_refresh(real);
    *err = 0;
    return fake_at(real);
}

int clock_gettime(clockid_t clk, struct timespec *ts) {
    int err;
    if (clk != CLOCK_REALTIME && clk != CLOCK_REALTIME_COARSE)
        return (int)syscall(SYS_clock_gettime, clk, ts);
    long long t = fake_now(clk, &err);
    if (err) return -1;
    ts->tv_sec = t / NS - (t % NS < 0);
    ts->tv_nsec = t % NS + (t % NS < 0 ? NS : 0);
    return 0;
}

/* No <sys/time.h>: its gettimeofday prototype differs between libcs. */
struct skew_timeval { long tv_sec, tv_usec; };

int gettimeofday(struct skew_timeval *tv, void *tz) {
    int err;
    if (tz && syscall(SYS_gettimeofday, NULL, tz) != 0) return -1;
    if (!tv) return 0;
    long long us = fake_now(CLOCK_REALTIME, &err) / 1000;
    if (err) return -1;
    tv->tv_sec = us / 1000000 - (us % 1000000 < 0);
    tv->tv_usec = us % 1000000 + (us % 1000000 < 0 ? 1000000 : 0);
    return 0;
}

time_t time(time_t *out) {
    int err;
    long long t = fake_now(CLOCK_REALTIME, &err);
    if (err) return (time_t)-1;
    time_t s = (time_t)(t / NS - (t % NS < 0));
    if (out) *out = s;
    return s;
}
