/*
 * process.c - see process.h. /proc/self/stat fields after the command name
 * (which may hold spaces, hence the split at the last ')'): utime 14,
 * stime 15, starttime 22 (clock ticks since boot), vsize 23 (bytes),
 * rss 24 (pages); the boot time is "btime" in /proc/stat.
 */
#include "metrics/process.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static bool read_file(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = 0;
    return n > 0;
}

static double boot_time(void) {
    char buf[8192];
    if (!read_file("/proc/stat", buf, sizeof buf)) return 0;
    const char *p = strstr(buf, "\nbtime ");
    return p ? strtod(p + 7, NULL) : 0;
}

void process_write_metrics(prom_buf *b) {
    char stat[1024];
    double btime = boot_time();
    double ticks = (double)sysconf(_SC_CLK_TCK), page = (double)sysconf(_SC_PAGESIZE);
    if (ticks <= 0) ticks = 100;
    if (btime > 0 && read_file("/proc/self/stat", stat, sizeof stat)) {
        const char *p = strrchr(stat, ')');
        double f[32] = {0};
        int n = 0;
        if (p) { /* f[k] = field k + 3 */
            p++;
            char *end;
            while (n < 32) {
                while (*p == ' ') p++;
                if (!*p || *p == '\n') break;
                f[n++] = strtod(p, &end);
                if (end == p) { /* the state letter */
                    while (*p && *p != ' ') p++;
                } else p = end;
            }
        }
        if (n > 21) {
            prom_write_simple(b, "process_virtual_memory_bytes", "Virtual memory size in bytes.",
                              "gauge", f[20]);
            prom_write_simple(b, "process_resident_memory_bytes", "Resident memory size in bytes.",
                              "gauge", f[21] * page);
            prom_write_simple(b, "process_start_time_seconds",
                              "Start time of the process since unix epoch in seconds.", "gauge",
                              f[19] / ticks + btime);
            prom_write_simple(b, "process_cpu_seconds_total",
                              "Total user and system CPU time spent in seconds.", "counter",
                              f[11] / ticks + f[12] / ticks);
        }
    }
    struct rlimit rl;
    DIR *d = opendir("/proc/self/fd");
    if (d && getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        int fds = 0;
        for (struct dirent *e; (e = readdir(d));)
            if (e->d_name[0] != '.') fds++;
        prom_write_simple(b, "process_open_fds", "Number of open file descriptors.", "gauge", fds);
        prom_write_simple(b, "process_max_fds", "Maximum number of open file descriptors.", "gauge",
                          (double)rl.rlim_cur);
    }
    if (d) closedir(d);
}
