/* The offset of an object slot, for compiled code that reads or writes instances of a slotted class
   directly (sim/_fastpath.c, strategies/_kernels.c). Include after <Python.h> and <structmember.h>. */

#ifndef CTXBENCH_SLOT_OFFSET_H
#define CTXBENCH_SLOT_OFFSET_H

/* The offset of slot `name` of `type` (found through the MRO) into *out: 0, or -1 with TypeError
   when it is not a writable object slot. */
static int slot_offset(PyTypeObject *type, const char *name, Py_ssize_t *out)
{
    PyObject *d = PyObject_GetAttrString((PyObject *)type, name);
    PyMemberDef *def;
    if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type)) {
        Py_XDECREF(d);
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s.%s is not a slot", type->tp_name, name);
        return -1;
    }
    def = ((PyMemberDescrObject *)d)->d_member;
    Py_DECREF(d);
    if (def->type != T_OBJECT_EX || (def->flags & READONLY)) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not a writable object slot", type->tp_name, name);
        return -1;
    }
    *out = def->offset;
    return 0;
}

#endif
