/* The module init that tb_monitor's optional C accelerators share (_accumulator.c,
 * sinks/_encoding.c, rank/_stepclock.c; setup.py puts this folder on their include
 * path).
 */
#ifndef TB_MONITOR_MODULE_H
#define TB_MONITOR_MODULE_H

#include <Python.h>

/* A new module from `def` holding `type` (its name: the last part of tp_name) unless `type` is
 * NULL; NULL with an exception set on failure.
 *
 * Free-threaded builds are told the module needs no GIL: on those builds each accelerator
 * leaves out what relies on the GIL for its atomicity, and tb_monitor uses its pure-Python
 * twin instead.
 */
static inline PyObject *
tb_monitor_module(PyModuleDef *def, PyTypeObject *type)
{
    PyObject *module = PyModule_Create(def);
    if (module == NULL) {
        return NULL;
    }
#ifdef Py_GIL_DISABLED
    PyUnstable_Module_SetGIL(module, Py_MOD_GIL_NOT_USED);
#endif
    if (type != NULL && PyModule_AddType(module, type) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}

#endif /* TB_MONITOR_MODULE_H */
