/* The architectures cake-rmsnorm ships machine code for, as sm numbers (each built as sm_<N>a),
 * in the bit order of cake_rmsnorm_built_archs(). The one list: setup.py builds these
 * fatbins, the dispatch layer has a window table for each, and Python reads it through
 * cake_rmsnorm_shipped_archs(). */
#ifndef CAKE_RMSNORM_ARCHS_H_
#define CAKE_RMSNORM_ARCHS_H_

#define CAKE_RMSNORM_SHIPPED_ARCHS 90, 100, 103, 107

#endif /* CAKE_RMSNORM_ARCHS_H_ */
