#include <isa-l.h>
#include <isa-l/igzip_lib.h>
#include <isa-l/crc.h>
#include <isa-l/crc64.h>
