/* The common module's public API: every header of common/ in one include. */
#ifndef SPARROW_COMMON_H
#define SPARROW_COMMON_H

#include "sparrow/arena.h"
#include "sparrow/config.h"
#include "sparrow/err.h"
#include "sparrow/eval.h"
#include "sparrow/hash.h"
#include "sparrow/http.h"
#include "sparrow/log.h"
#include "sparrow/metrics.h"
#include "sparrow/signal.h"
#include "sparrow/time.h"

#endif
