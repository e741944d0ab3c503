/*
 * Reference for ParseHostLiteral: prints, for each input line, the line,
 * what glibc's inet_aton makes of it, and what getaddrinfo(AI_NUMERICHOST,
 * AF_INET) makes of it ("-" = rejected), tab-separated.
 * Regenerate glibc_inet_aton.tsv with:
 *   cc -O2 -o /tmp/inet_aton glibc_inet_aton.c &&
 *   python3 gen_inputs.py | /tmp/inet_aton > glibc_inet_aton.tsv
 */
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
int main(void){
  char line[4096];
  while (fgets(line, sizeof line, stdin)) {
    size_t n = strlen(line); if (n && line[n-1]=='\n') line[--n]=0;
    struct in_addr a; char buf[64];
    const char *aton = "-";
    if (inet_aton(line, &a)) { inet_ntop(AF_INET, &a, buf, sizeof buf); aton = buf; }
    struct addrinfo hints = {0}, *res = NULL; hints.ai_family = AF_INET; hints.ai_flags = AI_NUMERICHOST;
    char gbuf[64]; const char *gai = "-";
    if (getaddrinfo(line, NULL, &hints, &res) == 0) { inet_ntop(AF_INET, &((struct sockaddr_in*)res->ai_addr)->sin_addr, gbuf, sizeof gbuf); gai = gbuf; freeaddrinfo(res);} 
    printf("%s\t%s\t%s\n", line, aton, gai);
  }
}
