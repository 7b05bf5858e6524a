package lbagent_test

import (
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type coordinationList = coordinationv1.LeaseList

const metav1False = metav1.ConditionFalse
