/* child.c: see child.h. */
#include "child.h"
#include "tap.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int run_in_child_status(void (*fn)(void *), void *arg, char *err, size_t errlen)
{
    int fd[2];
    if (pipe(fd))
        bail_out("pipe failed");
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        bail_out("fork failed");
    if (pid == 0) {
        struct rlimit no_core = { 0, 0 };   /* a child killed by a signal leaves no core */
        setrlimit(RLIMIT_CORE, &no_core);
        dup2(fd[1], 2);
        close(fd[0]);
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0)
            dup2(null, 1);
        fn(arg);
        _exit(0);
    }
    close(fd[1]);
    size_t len = 0;
    ssize_t r;
    while (len + 1 < errlen && (r = read(fd[0], err + len, errlen - 1 - len)) > 0)
        len += (size_t)r;
    err[len] = '\0';
    close(fd[0]);
    int status;
    waitpid(pid, &status, 0);
    return status;
}

int run_in_child(void (*fn)(void *), void *arg, char *err, size_t errlen)
{
    int status = run_in_child_status(fn, arg, err, errlen);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
