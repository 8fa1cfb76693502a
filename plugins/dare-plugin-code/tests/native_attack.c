/* The native code of the hostile corpus's native cases (tests/test_sandbox_corpus.py builds it with
   the system C compiler): its constructor runs when the library is loaded and tries every attack
   a program with native code could make. Compile-time parameters: OUTSIDE (a world-writable
   directory outside the sandbox), UNIX_SOCKET (a host Unix socket), CALLER_PID (the test process).
   With DARE_NATIVE_DRY set it only records that it ran (the control outside the sandbox). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/msg.h>
#include <sys/resource.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

static void mark(const char *what) {
    int fd = open("native_ran.txt", O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd >= 0) {
        write(fd, what, strlen(what));
        write(fd, "\n", 1);
        close(fd);
    }
}

__attribute__((constructor)) static void attack(void) {
    mark("loaded");
    if (getenv("DARE_NATIVE_DRY")) return;
    int fd = open(OUTSIDE "/native.txt", O_WRONLY | O_CREAT, 0666);
    if (fd >= 0) { write(fd, "escaped\n", 8); close(fd); mark("wrote outside"); }
    if (shmget(IPC_PRIVATE, 1 << 20, IPC_CREAT | 0600) >= 0) mark("shm");
    if (msgget(IPC_PRIVATE, IPC_CREAT | 0600) >= 0) mark("msg");
    if (semget(IPC_PRIVATE, 1, IPC_CREAT | 0600) >= 0) mark("sem");
    long key = syscall(SYS_keyctl, 10 /* KEYCTL_SEARCH */, -3 /* session */, "user", "dare-corpus", 0);
    char buf[256] = {0};
    if (key >= 0 && syscall(SYS_keyctl, 11 /* KEYCTL_READ */, key, buf, sizeof buf - 1) > 0) {
        printf("key: %s\n", buf);
        mark("keyring");
    }
    struct rlimit small = {1 << 20, 1 << 20};
    if (prlimit(CALLER_PID, RLIMIT_FSIZE, &small, NULL) == 0) mark("prlimit");
    pid_t pid = fork();
    if (pid == 0) { setsid(); sleep(30); _exit(0); }
    if (pid > 0) mark("forked");
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    strncpy(addr.sun_path, UNIX_SOCKET, sizeof addr.sun_path - 1);
    if (s >= 0 && connect(s, (struct sockaddr *)&addr, sizeof addr) == 0) { write(s, "hello", 5); mark("unix"); }
    if (mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) != MAP_FAILED)
        mark("rwx");
    if (syscall(SYS_memfd_create, "x", 0) >= 0) mark("memfd");
    fflush(stdout);
}
